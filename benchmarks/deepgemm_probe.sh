#!/usr/bin/env bash
# DeepGEMM on the GPU machine, to see whether and why it runs: build from source (CUTLASS headers from the
# carried nvidia-cutlass wheel in .whl/, fmt from .carry/dg/third-party/fmt),
# then one fp8_gemm_nt call under faulthandler; if it crashes, again with the system's libstdc++ preloaded (how
# it runs there: docs/scaled_gemm.md, "Against DeepGEMM"), and, if that crashes too, under cuda-gdb for a
# native backtrace.
# Prepare here: .carry/dg = DeepGEMM's source (git archive of deepseek-ai/DeepGEMM), with fmt's include/ in
# third-party/fmt; then run it with carry [".whl", ".carry"]. Writes dg_build.log, probe.log, gdb.log to $OUT.
set -u
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/nvidia_cutlass*.whl
cd .carry/dg
mkdir -p third-party/cutlass
ln -sfn /tmp/site/cutlass_library/source/include third-party/cutlass/include
for d in cute cutlass; do ln -sfn $PWD/third-party/cutlass/include/$d deep_gemm/include/$d; done
(time python3 setup.py build_ext --inplace) > $OUT/dg_build.log 2>&1; echo build rc=$?; tail -4 $OUT/dg_build.log
export PYTHONPATH=$PWD:/tmp/site
cat > /tmp/probe.py <<'PY'
import torch, deep_gemm
print(deep_gemm.__version__, flush=True)
m, n, k = 128, 4096, 7168
a = torch.randn(m, k, device="cuda").to(torch.float8_e4m3fn)
sa = torch.rand(m, k // 128, device="cuda") + 0.5
b = torch.randn(n, k, device="cuda").to(torch.float8_e4m3fn)
sb = torch.rand(n // 128, k // 128, device="cuda") + 0.5
d = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
print("calling fp8_gemm_nt", flush=True)
deep_gemm.fp8_gemm_nt((a, sa), (b, sb), d)
torch.cuda.synchronize()
ref = (a.float() * sa.repeat_interleave(128, 1)) @ (b.float() * sb.repeat_interleave(128, 0).repeat_interleave(128, 1)).t()
print("ok, relative error", ((d.float() - ref).norm() / ref.norm()).item(), flush=True)
PY
DG_JIT_DEBUG=1 DG_JIT_PRINT_COMPILER_COMMAND=1 timeout 150 python3 -X faulthandler /tmp/probe.py > $OUT/probe.log 2>&1
echo probe rc=$?; tail -30 $OUT/probe.log
# The C++ runtimes involved: the one the extension links, and the system's, preloaded for a second try.
ldd deep_gemm/*.so | grep -i stdc++ | tee -a $OUT/probe.log
system_cxx=$(g++ -print-file-name=libstdc++.so.6)
python3 -c "import torch; print([l.split()[-1] for l in open('/proc/self/maps') if 'stdc++' in l][:1])" | tee -a $OUT/probe.log
if ! grep -q "^ok" $OUT/probe.log; then
  echo "retry with LD_PRELOAD=$system_cxx" | tee -a $OUT/probe.log
  LD_PRELOAD=$system_cxx timeout 150 python3 -X faulthandler /tmp/probe.py >> $OUT/probe.log 2>&1
  echo probe rc=$?; tail -8 $OUT/probe.log
fi
if ! grep -q "^ok" $OUT/probe.log; then
  timeout 90 cuda-gdb -batch -ex run -ex bt --args python3 /tmp/probe.py > $OUT/gdb.log 2>&1; tail -40 $OUT/gdb.log
fi
