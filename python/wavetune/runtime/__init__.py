"""What the kernel families share at run time: the native module (``native``), variant and launch
descriptions (``configs``), devices, streams and dtype codes (``device``), and tuned tables (``tables``).

Needs the native module (wavetune._C), never torch: functions that take torch tensors find torch in
``sys.modules``, since the caller has loaded it.
"""
