"""What cuBLASLt's FP8 matmul runs at on Hopper with each scaling it offers, against torch._scaled_mm, in one
interleaved run. Standalone: it needs torch (whose libcublasLt it calls through ctypes), not wavetune's build.

    python benchmarks/cublaslt_fp8_probe.py --out $OUT

Per LLM layer shape (N, K) and token count M, with e4m3 activations x [M, K] and weights w [N, K] (random,
scaled per token and per channel, or per 1x128 / 128x128 block), D = x @ w.T in bf16:
  torch_rowwise, torch_tensor   torch._scaled_mm with per-token x per-channel scales / per-tensor scales
  torch_block[_nk]              torch._scaled_mm with 1x128 and 128x128 block scales (where it takes them;
                                the weight's scales [K/128, N/128] or [N/128, K/128])
  lt_tensor, lt_outer            cublasLtMatmul with CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F and OUTER_VEC_32F
                                (per token x per channel), the heuristic's first algorithm, a 32 MiB workspace
  lt_block_<A>first_<x>_<w>     the same with VEC128_32F (activations) x BLK128x128_32F (weights): cuBLASLt's
                                A the weights (D^T = w x^T) or the activations (D = x w^T, written transposed),
                                each scale tensor K fastest (sxb, swb) or the outer dimension fastest (_t)
Every method is checked against the fp32 product of the dequantized operands first (output poisoned), then
timed as CUDA graphs over weight copies larger than twice the L2, replayed round-robin (medians). A method
cuBLASLt or torch refuses is reported as such. Writes <out>/cublaslt_fp8_probe.jsonl.
"""

from __future__ import annotations

import argparse
import ctypes
import importlib.util
import json
import math
import os
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("timing", REPO / "python" / "wavetune" / "tuning" / "timing.py")
timing = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(timing)

FP8 = torch.float8_e4m3fn
SHAPES = ((6144, 4096), (4096, 4096), (28672, 4096), (4096, 14336), (1280, 8192), (8192, 3584), (57344, 8192))
TOKENS = (1, 8, 16, 32, 64, 128, 512, 2048, 8192)
# cublasLt.h (CUDA 12.9 and 13): cudaDataType, compute type, descriptor attributes and scale modes.
R_32F, R_16BF, R_8F_E4M3, COMPUTE_32F = 0, 14, 28, 68
DESC_TRANSA, DESC_TRANSB, DESC_A_SCALE_POINTER, DESC_B_SCALE_POINTER = 3, 4, 17, 18
DESC_A_SCALE_MODE, DESC_B_SCALE_MODE = 31, 32
SCALE_SCALAR, SCALE_OUTER_VEC, SCALE_VEC128, SCALE_BLK128 = 0, 3, 4, 5
OP_N, OP_T, PREF_MAX_WORKSPACE = 0, 1, 1
WORKSPACE_BYTES = 32 << 20


class HeuristicResult(ctypes.Structure):
    _fields_ = [("algo", ctypes.c_uint64 * 8), ("workspace", ctypes.c_size_t), ("state", ctypes.c_int),
                ("waves", ctypes.c_float), ("reserved", ctypes.c_int * 4)]


class Lt:
    """The few cublasLt calls a matmul needs, on the library torch loaded."""

    def __init__(self):
        self.lib = ctypes.CDLL(f"libcublasLt.so.{torch.version.cuda.split('.')[0]}")
        self.handle = ctypes.c_void_p()
        self._ok(self.lib.cublasLtCreate(ctypes.byref(self.handle)), "create")
        self.workspace = torch.empty(WORKSPACE_BYTES, dtype=torch.uint8, device="cuda")
        self.keep = []  # descriptors and attribute values live as long as the graphs that use them

    @staticmethod
    def _ok(status: int, what: str):
        if status != 0:
            raise RuntimeError(f"cublasLt {what}: status {status}")

    def _set(self, desc, attribute: int, value):
        self.keep.append(value)
        self._ok(self.lib.cublasLtMatmulDescSetAttribute(desc, attribute, ctypes.byref(value), ctypes.sizeof(value)),
                 f"attribute {attribute}")

    def _layout(self, dtype: int, rows: int, cols: int, ld: int):
        layout = ctypes.c_void_p()
        self._ok(self.lib.cublasLtMatrixLayoutCreate(ctypes.byref(layout), dtype, ctypes.c_uint64(rows),
                                                     ctypes.c_uint64(cols), ctypes.c_int64(ld)), "layout")
        self.keep.append(layout)
        return layout

    def plan(self, m: int, n: int, k: int, sx, sw, mode_x: int, mode_w: int, weight_first: bool = True):
        """A launch of D[m, n] = x @ w.T: column-major D^T = w (op T) x^T, so cuBLASLt's A is w and B is x; or,
        not weight_first, column-major D = x (op T) w^T into o["out_t"] ([n, m] row-major)."""
        if not weight_first:
            return self._plan(n, m, k, sw, sx, mode_w, mode_x, "x", "w", "out_t")
        return self._plan(m, n, k, sx, sw, mode_x, mode_w, "w", "x", "out")

    def _plan(self, m, n, k, sx, sw, mode_x, mode_w, a_name, b_name, out_name):
        desc = ctypes.c_void_p()
        self._ok(self.lib.cublasLtMatmulDescCreate(ctypes.byref(desc), COMPUTE_32F, R_32F), "descriptor")
        self.keep.append(desc)
        self._set(desc, DESC_TRANSA, ctypes.c_int(OP_T))
        self._set(desc, DESC_TRANSB, ctypes.c_int(OP_N))
        self._set(desc, DESC_A_SCALE_POINTER, ctypes.c_void_p(sw.data_ptr()))
        self._set(desc, DESC_B_SCALE_POINTER, ctypes.c_void_p(sx.data_ptr()))
        self._set(desc, DESC_A_SCALE_MODE, ctypes.c_int(mode_w))
        self._set(desc, DESC_B_SCALE_MODE, ctypes.c_int(mode_x))
        a, b = self._layout(R_8F_E4M3, k, n, k), self._layout(R_8F_E4M3, k, m, k)
        d = self._layout(R_16BF, n, m, n)
        pref = ctypes.c_void_p()
        self._ok(self.lib.cublasLtMatmulPreferenceCreate(ctypes.byref(pref)), "preference")
        self.keep.append(pref)
        limit = ctypes.c_size_t(WORKSPACE_BYTES)
        self.keep.append(limit)
        self._ok(self.lib.cublasLtMatmulPreferenceSetAttribute(pref, PREF_MAX_WORKSPACE, ctypes.byref(limit),
                                                               ctypes.sizeof(limit)), "workspace")
        result, found = HeuristicResult(), ctypes.c_int()
        self._ok(self.lib.cublasLtMatmulAlgoGetHeuristic(self.handle, desc, a, b, d, d, pref, 1, ctypes.byref(result),
                                                         ctypes.byref(found)), "heuristic")
        if found.value < 1:
            raise RuntimeError("cublasLt has no algorithm for this scaling")
        self.keep.append(result)
        alpha, beta = ctypes.c_float(1.0), ctypes.c_float(0.0)
        self.keep += [alpha, beta]

        def launch(o):
            out = o[out_name]
            self._ok(self.lib.cublasLtMatmul(
                self.handle, desc, ctypes.byref(alpha), ctypes.c_void_p(o[a_name].data_ptr()), a,
                ctypes.c_void_p(o[b_name].data_ptr()), b, ctypes.byref(beta), ctypes.c_void_p(out.data_ptr()), d,
                ctypes.c_void_p(out.data_ptr()), d, ctypes.byref(result.algo), ctypes.c_void_p(self.workspace.data_ptr()),
                ctypes.c_size_t(WORKSPACE_BYTES), ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)), "matmul")
            return out

        return launch


def operands(m: int, n: int, k: int, copies: int) -> list[dict]:
    """Weight copies (rotated, so each launch reads its weights from HBM) sharing one activation and scales."""
    kb, nb = -(-k // 128), -(-n // 128)
    x = (torch.randn(m, k, device="cuda") * 2).to(FP8)
    shared = dict(
        x=x, sx=torch.rand(m, 1, device="cuda") * 0.01 + 1e-3, sw=torch.rand(1, n, device="cuda") * 0.01 + 1e-3,
        sx1=torch.tensor(0.02, device="cuda"), sw1=torch.tensor(0.01, device="cuda"),
        # 1x128 token blocks [M, K/128] and 128x128 weight blocks [N/128, K/128], row-major (K fastest) and
        # transposed (the outer dimension fastest): which of the two cuBLASLt reads is one of the questions.
        sxb=torch.rand(m, kb, device="cuda") * 0.01 + 1e-3, swb=torch.rand(nb, kb, device="cuda") * 0.01 + 1e-3,
        out=torch.empty(m, n, device="cuda", dtype=torch.bfloat16), out_t=torch.empty(n, m, device="cuda",
                                                                                     dtype=torch.bfloat16))
    shared.update(sxb_t=shared["sxb"].t().contiguous(), swb_t=shared["swb"].t().contiguous())
    return [dict(shared, w=(torch.randn(n, k, device="cuda") * 2).to(FP8)) for _ in range(copies)]


def reference(name: str, o: dict, k: int) -> torch.Tensor:
    x, w = o["x"].float(), o["w"].float()
    if name.endswith("_tensor"):
        return (x @ w.t()) * (o["sx1"] * o["sw1"])
    if "_block" in name:
        sx = o["sxb"].repeat_interleave(128, 1)[:, :k]
        sw = o["swb"].repeat_interleave(128, 0).repeat_interleave(128, 1)[: w.shape[0], :k]
        return (x * sx) @ (w * sw).t()
    return (x * o["sx"]) @ (w * o["sw"].t()).t()


def launches(lt: Lt, m: int, n: int, k: int, o: dict) -> tuple[dict, dict]:
    """The methods that run the problem, and why the others do not."""
    found, refused = {}, {}
    candidates = {
        "torch_rowwise": lambda: lambda o: torch._scaled_mm(o["x"], o["w"].t(), o["sx"], o["sw"], out_dtype=torch.bfloat16),
        "torch_tensor": lambda: lambda o: torch._scaled_mm(o["x"], o["w"].t(), o["sx1"], o["sw1"], out_dtype=torch.bfloat16),
        # torch's 1x128 x 128x128 recipe: scale_a [M, K/128] outer-dimension fastest; scale_b either way round.
        "torch_block": lambda: lambda o: torch._scaled_mm(o["x"], o["w"].t(), o["sxb_t"].t(), o["swb_t"],
                                                          out_dtype=torch.bfloat16),
        "torch_block_nk": lambda: lambda o: torch._scaled_mm(o["x"], o["w"].t(), o["sxb_t"].t(), o["swb"],
                                                             out_dtype=torch.bfloat16),
        "lt_tensor": lambda: lt.plan(m, n, k, o["sx1"], o["sw1"], SCALE_SCALAR, SCALE_SCALAR),
        "lt_outer": lambda: lt.plan(m, n, k, o["sx"], o["sw"], SCALE_OUTER_VEC, SCALE_OUTER_VEC),
    }
    # Block scales: which operand takes which mode (NVIDIA's sample gives A the 1x128 vectors and B the 128x128
    # blocks), and whether each scale tensor is stored K fastest or the outer dimension fastest.
    for first in ("w", "x"):
        for x_order in ("sxb", "sxb_t"):
            for w_order in ("swb", "swb_t"):
                candidates[f"lt_block_{first}first_{x_order}_{w_order}"] = (
                    lambda x_order=x_order, w_order=w_order, first=first: lt.plan(
                        m, n, k, o[x_order], o[w_order], SCALE_VEC128, SCALE_BLK128, weight_first=first == "w"))
    for name, make in candidates.items():
        try:
            launch = make()
            o["out"].fill_(float("nan"))
            o["out_t"].fill_(float("nan"))
            out = launch(o)
            torch.cuda.synchronize()
            ref = reference(name, o, k)
            if "xfirst" in name:
                ref = ref.t()
            error = ((out.float() - ref).norm() / ref.norm()).item()
            if not error < 1e-2:
                raise RuntimeError(f"relative error {error:.3g} against the fp32 reference")
            found[name] = launch
        except (RuntimeError, ValueError) as exc:
            refused[name] = str(exc).splitlines()[0][:200]
    return found, refused


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--reps", type=int, default=10)
    p.add_argument("--out", type=Path, default=Path(os.environ.get("OUT") or REPO / "benchmarks" / "results"))
    args = p.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)
    props = torch.cuda.get_device_properties(0)
    lt = Lt()
    path = args.out / "cublaslt_fp8_probe.jsonl"
    with path.open("w") as f:
        f.write(json.dumps({"device": props.name, "torch": torch.__version__, "cuda": torch.version.cuda,
                            "cublasLt": lt.lib.cublasLtGetVersion(), "reps": args.reps}) + "\n")
        for n, k in SHAPES:
            copies = max(2, math.ceil(2 * props.L2_cache_size / (n * k)) + 1)
            for m in TOKENS:
                ops = operands(m, n, k, copies)
                found, refused = launches(lt, m, n, k, ops[0])
                us = timing.interleaved_us(found, [(o,) for o in ops], per_graph=max(copies, 8), reps=args.reps)
                row = dict(m=m, n=n, k=k, us=us, refused=refused)
                f.write(json.dumps(row) + "\n")
                f.flush()
                base = us.get("torch_rowwise")
                print(f"M={m} N={n} K={k}: " + ", ".join(
                    f"{name} {t:.1f} us" + (f" ({base / t:.2f}x)" if base else "") for name, t in us.items())
                    + (f"; refused: {refused}" if refused else ""), flush=True)


if __name__ == "__main__":
    main()
