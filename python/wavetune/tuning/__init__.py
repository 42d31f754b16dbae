"""Offline tuning: measuring a kernel family on the GPU a table is for, fitting the latency model and
writing the table (``python -m wavetune tune --family NAME``).

Shared by every family: ``log`` (the resumable measurement log), ``runner`` (measuring a plan here or
spread over the GPUs of one host, with a progress bar), ``timing`` (CUDA-graph timing through torch),
``fitting`` (reading case logs, writing a family's table), ``model`` (the wave-aware latency model),
``tablefile`` (the table format), ``splits`` (the hashed tune / held-out splits), ``report`` (the statistics
and tables of reports that judge choices). Each family's own driver is its ``tuning`` module
(``wavetune.families.<name>.tuning``); ``deploy`` is the dense GEMM's deployment tuning (``tune --shapes``).
"""
