"""torch.ops.wavetune, wavetune.nn.Linear and patch: registration, fake implementations, tracing and
patching on the CPU (meta tensors); outputs, torch.compile and CUDA graphs on a Hopper GPU (the gpu tier)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

import wavetune
from wavetune import _C
from wavetune.families.gemm import api
from wavetune.families.gemm import tuning
from wavetune.runtime import tables
from wavetune.tuning import tablefile

torch = pytest.importorskip("torch")
wnn = pytest.importorskip("wavetune.nn")  # registers torch.ops.wavetune
from wavetune import torch_ops  # noqa: E402,F401  (after the skip: needs torch; registers the operators)
from wavetune.families.gemm import torch_ops as gemm_ops  # noqa: E402

BF16 = torch.bfloat16


def tensor(*shape, device="meta", dtype=BF16):
    return torch.randn(*shape, device=device, dtype=dtype) / shape[-1] ** 0.5


class Block(torch.nn.Module):
    """A decoder-like layer: attention projections with bias (as in Qwen2), a gated MLP without."""

    def __init__(self, hidden=64, intermediate=128):
        super().__init__()
        self.qkv = torch.nn.Linear(hidden, 3 * hidden)
        self.o = torch.nn.Linear(hidden, hidden, bias=False)
        self.gate_up = torch.nn.Linear(hidden, 2 * intermediate, bias=False)
        self.down = torch.nn.Linear(intermediate, hidden, bias=False)

    def forward(self, x):
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        x = x + self.o(torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True))
        gate, up = self.gate_up(x).chunk(2, dim=-1)
        return x + self.down(torch.nn.functional.silu(gate) * up)


class TinyDecoder(torch.nn.Module):
    def __init__(self, layers=2, hidden=64, vocab=136):
        super().__init__()
        self.embed = torch.nn.Embedding(vocab, hidden)
        self.layers = torch.nn.ModuleList(Block(hidden) for _ in range(layers))
        self.lm_head = torch.nn.Linear(hidden, vocab, bias=False)
        self.lm_head.weight = self.embed.weight  # tied, as in many small LLMs

    def forward(self, tokens):
        x = self.embed(tokens)
        for layer in self.layers:
            x = layer(x)
        return self.lm_head(x)


class CustomLinear(torch.nn.Linear):
    pass


def mixed_model():
    """TinyDecoder plus layers patch must leave alone: fp32, unaligned, a subclass."""
    with torch.device("meta"):  # patch swaps layers on the meta device too (a CPU model it leaves alone)
        model = meta_decoder()
        model.extra = torch.nn.ModuleDict({
            "fp32": torch.nn.Linear(64, 64),
            "unaligned": torch.nn.Linear(64, 60, dtype=BF16),
            "subclass": CustomLinear(64, 64, dtype=BF16),
        })
    return model


def meta_decoder():
    """A TinyDecoder on the meta device, its embedding and LM head still tied."""
    with torch.device("meta"):
        return TinyDecoder().to(BF16)


class TestCPU:
    def test_registered_with_schemas(self):
        assert str(torch.ops.wavetune.gemm.default._schema) == (
            "wavetune::gemm(Tensor a, Tensor b, str? batch_invariance=None) -> Tensor")
        assert str(torch.ops.wavetune.linear.default._schema) == (
            "wavetune::linear(Tensor x, Tensor weight, Tensor? bias=None, str? batch_invariance=None) -> Tensor")

    @pytest.mark.parametrize("batch", [(), (3,), (2, 3)])
    @pytest.mark.parametrize("dtype", [BF16, torch.float16])
    def test_fake_linear_shapes(self, batch, dtype):
        x, w, b = tensor(*batch, 5, 64, dtype=dtype), tensor(32, 64, dtype=dtype), tensor(32, dtype=dtype)
        for bias in (None, b):
            y = torch.ops.wavetune.linear(x, w, bias)
            assert (y.shape, y.dtype, y.device) == ((*batch, 5, 32), dtype, x.device)
            assert y.is_contiguous()
        y = torch.ops.wavetune.gemm(x, w.t())
        assert (y.shape, y.dtype) == ((*batch, 5, 32), dtype)

    def test_fake_tensor_mode_keeps_the_cuda_device(self):
        from torch._subclasses.fake_tensor import FakeTensorMode

        with FakeTensorMode():
            x = torch.empty(2, 7, 64, dtype=BF16, device="cuda")
            w = torch.empty(48, 64, dtype=BF16, device="cuda")
            y = torch.ops.wavetune.linear(x, w, torch.empty(48, dtype=BF16, device="cuda"))
        assert (y.shape, y.dtype, str(y.device), y.stride()) == ((2, 7, 48), BF16, "cuda:0", (336, 48, 1))

    @pytest.mark.parametrize("op", ["gemm", "linear"])
    def test_opcheck(self, op):
        x, w = tensor(2, 5, 64), tensor(32, 64)
        args = (x, w.t()) if op == "gemm" else (x, w, tensor(32))
        results = torch.library.opcheck(getattr(torch.ops.wavetune, op).default, args)
        assert set(results.values()) == {"SUCCESS"}, results

    @pytest.mark.parametrize(
        "args, error, message",
        [
            ((tensor(5, 64), tensor(32, 48)), ValueError, "cannot be multiplied \\(64 != 48\\)"),
            ((tensor(5, 64), tensor(32, 64, dtype=torch.float16)), TypeError, "must both be bfloat16 or both float16"),
            ((tensor(5, 64), tensor(64)), ValueError, "weight must be \\[N, K\\]"),
            ((tensor(5, 64), tensor(32, 64), tensor(16)), ValueError, "bias must be a torch.bfloat16 tensor of shape \\(32,\\)"),
            ((tensor(5, 64), tensor(32, 64), tensor(32, dtype=torch.float32)), ValueError, "got torch.float32"),
        ],
    )
    def test_fake_linear_rejects(self, args, error, message):
        with pytest.raises(error, match=message):
            torch.ops.wavetune.linear(*args)

    def test_cpu_tensors_are_refused(self):
        with pytest.raises(ValueError, match="wavetune.linear runs on CUDA tensors .* got one on cpu"):
            torch.ops.wavetune.linear(tensor(5, 64, device="cpu"), tensor(32, 64, device="cpu"))
        with pytest.raises(ValueError, match="wavetune.gemm runs on CUDA tensors"):
            torch.ops.wavetune.gemm(tensor(5, 64, device="cpu"), tensor(64, 32, device="cpu"))

    @pytest.mark.parametrize("workspace_bytes", [0, 4096])
    def test_a_planned_launch_passes_pointers_workspace_and_stream(self, monkeypatch, workspace_bytes):
        # The launch a plan makes, with the native call recorded (CPU tensors: nothing runs).
        launches = []

        class Prepared:  # what _C.PreparedGemm resolves once, and a record of each call
            device = -1

            def __call__(self, *args):
                launches.append(args)

        prepared = Prepared()
        prepared.workspace_bytes = workspace_bytes
        monkeypatch.setattr(gemm_ops, "stream_getter", lambda torch: lambda device: 7)
        x, w, bias = torch.empty(2, 5, 64, dtype=BF16), torch.empty(48, 64, dtype=BF16), torch.empty(48, dtype=BF16)
        launch = gemm_ops._native_launch(prepared, torch.Size((2, 5, 48)))
        result = launch(x, w.data_ptr(), bias)
        assert (result.shape, result.dtype) == ((2, 5, 48), BF16)
        (a, b, bias_ptr, d, workspace, stream, residual), = launches
        assert (a, b, bias_ptr, d, stream) == (x.data_ptr(), w.data_ptr(), bias.data_ptr(), result.data_ptr(), 7)
        assert (workspace != 0) == (workspace_bytes > 0) and residual == 0  # no residual: a null pointer
        launch(x, w.data_ptr(), None)
        assert launches[1][2] == 0  # no bias: a null pointer
        launch(x, w.data_ptr(), None, result)
        assert launches[2][6] == result.data_ptr()

    def test_operand_rules_come_before_the_device(self):
        """A user on the CPU meets the layout rules before the device rule (fix one error, then the next)."""
        x, w = torch.empty(5, 64, dtype=BF16), torch.empty(48, 64, dtype=BF16)
        with pytest.raises(ValueError, match="last dimension must be contiguous"):
            api.check_operands(x.t().contiguous().t(), w.t())
        with pytest.raises(ValueError, match="bias must be a contiguous"):
            api.check_operands(x, w.t(), torch.empty(47, dtype=BF16))
        with pytest.raises(ValueError, match="must be on one CUDA device"):
            api.check_operands(x, w.t())

    def test_patch_swaps_eligible_layers_and_reports_the_rest(self):
        model = mixed_model()
        parameters = {name: p for name, p in model.named_parameters()}
        report = wavetune.patch(model)
        blocks = [f"layers.{i}.{layer}" for i in range(2) for layer in ("qkv", "o", "gate_up", "down")]
        assert report.patched == [*blocks, "lm_head"]
        assert set(report.skipped) == {"extra.fp32", "extra.unaligned", "extra.subclass"}
        assert "torch.float32" in report.skipped["extra.fp32"]
        assert "out_features=60" in report.skipped["extra.unaligned"]
        assert "subclass" in report.skipped["extra.subclass"]
        assert all(type(model.get_submodule(name)) is wnn.Linear for name in report.patched)
        assert type(model.extra.subclass) is CustomLinear
        # the same Parameter objects, the tie between lm_head and the embedding included
        assert {name: p for name, p in model.named_parameters()} == parameters
        assert model.lm_head.weight is model.embed.weight
        assert wavetune.patch(model).patched == []  # patching twice changes nothing

        assert wavetune.unpatch(model) == report.patched
        assert all(type(model.get_submodule(name)) is torch.nn.Linear for name in report.patched)
        assert {name: p for name, p in model.named_parameters()} == parameters

    def test_patch_swaps_a_layer_reached_by_two_paths_at_both(self):
        shared = torch.nn.Linear(64, 64, dtype=BF16, device="meta")
        model = torch.nn.ModuleDict({"a": torch.nn.Sequential(shared), "b": torch.nn.Sequential(shared)})
        assert wavetune.patch(model).patched == ["a.0", "b.0"]
        assert type(model.a[0]) is type(model.b[0]) is wnn.Linear and model.a[0].weight is model.b[0].weight
        assert wavetune.unpatch(model) == ["a.0", "b.0"]

    def test_patch_leaves_a_cpu_model_alone_and_says_so(self):
        model = TinyDecoder().to(BF16)
        report = wavetune.patch(model)
        assert report.patched == [] and len(report.skipped) == 9
        assert all("on cpu: wavetune runs on CUDA GPUs" in reason for reason in report.skipped.values())
        with torch.inference_mode():
            model(torch.randint(0, 136, (2, 5)))  # still runs, on PyTorch's kernels

    def test_patch_takes_a_module(self):
        with pytest.raises(TypeError, match="wavetune.patch takes a torch.nn.Module, got int"):
            wavetune.patch(3)

    def test_a_wavetune_layer_on_the_cpu_refuses(self):
        layer = wnn.Linear.from_linear(torch.nn.Linear(64, 64, dtype=BF16))
        with torch.inference_mode(), pytest.raises(ValueError, match="runs on CUDA tensors"):
            layer(tensor(2, 64, device="cpu"))
        with pytest.raises(RuntimeError, match="inference-only"):
            layer(tensor(2, 64, device="cpu"))  # grad mode, parameters that require grad

    def test_patched_model_on_meta_tensors_infers_shapes(self):
        model = meta_decoder()
        assert len(wavetune.patch(model).patched) == 9
        with torch.inference_mode():
            logits = model(torch.zeros(2, 5, dtype=torch.long, device="meta"))
        assert (logits.shape, logits.dtype, logits.device.type) == ((2, 5, 136), BF16, "meta")

    def test_from_linear_rejects(self):
        with pytest.raises(TypeError, match="expected an nn.Linear, got Conv1d"):
            wnn.Linear.from_linear(torch.nn.Conv1d(8, 8, 1))
        with pytest.raises(ValueError, match="weight dtype torch.float32"):
            wnn.Linear.from_linear(torch.nn.Linear(64, 64))
        with pytest.raises(ValueError, match="the model is itself an nn.Linear"):
            wavetune.patch(torch.nn.Linear(64, 64, dtype=BF16))

    def test_compile_fullgraph_traces_the_op(self):
        model = meta_decoder()
        assert len(wavetune.patch(model).patched) == 9
        graphs = []

        def recording_backend(gm, example_inputs):
            graphs.append(gm)
            return gm.forward

        tokens = torch.zeros(2, 5, dtype=torch.long, device="meta")
        with torch.inference_mode():
            logits = torch.compile(model, fullgraph=True, backend=recording_backend)(tokens)
        assert (logits.shape, logits.dtype) == ((2, 5, 136), BF16)
        targets = [str(node.target) for node in graphs[0].graph.nodes if node.op == "call_function"]
        assert targets.count("wavetune.linear.default") == 9

    def test_shapes_json_is_a_suite_the_tuner_reads(self, tmp_path):
        model = mixed_model()
        expected = {"layers.*.qkv": [192, 64], "layers.*.o": [64, 64], "layers.*.gate_up": [256, 64],
                    "layers.*.down": [64, 128], "lm_head": [136, 64]}
        assert wnn.model_shapes(model) == expected
        wavetune.patch(model)
        assert wnn.model_shapes(model) == expected  # patched layers count the same
        path = tmp_path / "tiny.json"
        written = wnn.write_shapes(model, path, name="tiny", token_counts=(1, 128))
        assert json.loads(path.read_text()) == written
        assert written["dtype"] == "bfloat16" and written["models"] == {"tiny": expected}
        shapes = tuning.suite_shapes(path)
        assert len(shapes) == 10 and (128, 256, 64) in shapes and (1, 136, 64) in shapes

    def test_shapes_json_refuses_mixed_dtypes(self, tmp_path):
        model = torch.nn.Sequential(torch.nn.Linear(64, 64, dtype=BF16), torch.nn.Linear(64, 64, dtype=torch.float16))
        with pytest.raises(ValueError, match="share one dtype"):
            wnn.write_shapes(model, tmp_path / "x.json")

    def test_patch_without_torch_says_what_is_missing(self):
        code = ("import sys; sys.modules['torch'] = None\n"
                "import wavetune\n"
                "try:\n    wavetune.patch\nexcept ImportError as exc:\n    print(exc)\n")
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd="/")
        assert done.returncode == 0, done.stderr
        assert done.stdout.startswith("wavetune.patch needs torch (pip install torch)")


def relative_error(result, reference):
    return ((result.double() - reference.double()).norm() / reference.double().norm()).item()


TOLERANCE = 1e-2  # relative Frobenius error of bf16 outputs with fp32 accumulation


@pytest.mark.gpu
class TestGPU:
    @pytest.fixture
    def models(self):
        """(reference, patched): two TinyDecoders with the same weights on the GPU."""
        torch.manual_seed(0)
        reference = TinyDecoder(layers=2, hidden=256, vocab=1032).to("cuda", BF16).eval()
        patched = TinyDecoder(layers=2, hidden=256, vocab=1032).to("cuda", BF16).eval()
        patched.load_state_dict(reference.state_dict())
        assert len(wavetune.patch(patched).patched) == 9
        return reference, patched

    @pytest.mark.parametrize("batch", [(), (3,)])
    def test_ops_match_torch(self, batch):
        x, w, b = tensor(*batch, 40, 264, device="cuda"), tensor(520, 264, device="cuda"), tensor(520, device="cuda")
        with torch.inference_mode():
            assert relative_error(torch.ops.wavetune.linear(x, w, b), torch.nn.functional.linear(x, w, b)) < TOLERANCE
            assert relative_error(torch.ops.wavetune.gemm(x, w.t()), x @ w.t()) < TOLERANCE

    def test_patched_model_matches_the_reference(self, models):
        reference, patched = models
        tokens = torch.randint(0, 1032, (2, 77), device="cuda")
        with torch.inference_mode():
            assert relative_error(patched(tokens), reference(tokens)) < TOLERANCE

    def test_compile_fullgraph_matches_eager(self, models):
        _, patched = models
        tokens = torch.randint(0, 1032, (2, 77), device="cuda")
        with torch.inference_mode():
            eager = patched(tokens)
            compiled = torch.compile(patched, fullgraph=True)(tokens)
        assert relative_error(compiled, eager) < TOLERANCE

    def test_cuda_graph_replay_matches_eager(self, models):
        _, patched = models
        static_tokens = torch.randint(0, 1032, (8, 1), device="cuda")  # a decode step: one token per sequence
        with torch.inference_mode():
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                patched(static_tokens)  # warm-up on a side stream, as PyTorch's example does
            torch.cuda.current_stream().wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                static_logits = patched(static_tokens)
            for _ in range(2):
                static_tokens.copy_(torch.randint(0, 1032, (8, 1), device="cuda"))
                graph.replay()
                assert relative_error(static_logits, patched(static_tokens)) < TOLERANCE

    def test_repeated_calls_reuse_the_launch_and_the_native_checks_still_hold(self, tmp_path):
        """Under a table of one compiled CUTLASS variant (a cuBLAS choice runs torch's own operator)."""
        x, w, b = tensor(2, 40, 264, device="cuda"), tensor(520, 264, device="cuda"), tensor(520, device="cuda")
        variant = next((c for c in wavetune.configs() if (c.dtype, c.b_layout) == ("bf16", "col")
                        and not c.built_in), None)
        if variant is None:
            pytest.skip("no compiled bf16 column-major CUTLASS variant in this build")
        props, table = wavetune.device_properties(), tmp_path / "one.wtt"
        tablefile.write_table(
            table, meta={"gpu_name": props["name"], "sm_count": props["sm_count"],
                         "config_space_hash": wavetune.build_info()["config_space_hash"], "wavetune_version": "test",
                         "cuda_version": 13000, "created": "2026-12-07T00:00:00+00:00"},
            configs=[{"variant": variant.name, "decomposition": "data_parallel", "splits": 1}],
            waves={0: {1: [1.0, 0.0, 0.0, 0.0]}}, micro={}, exact=None)
        device = torch.cuda.current_device()
        tables.ensure_table(device)
        wavetune.load_table(table)
        gemm_ops._plans.clear()
        try:
            self.check_repeated_calls(x, w, b)
        finally:
            _C.use_table(device, None)
            tables.checked_devices().discard(device)
            gemm_ops._plans.clear()

    @staticmethod
    def check_repeated_calls(x, w, b):
        with torch.inference_mode():
            first = torch.ops.wavetune.linear(x, w, b)
            assert len(gemm_ops._plans) == 1
            again = torch.ops.wavetune.linear(x.clone(), w, b)
            assert len(gemm_ops._plans) == 1 and torch.equal(again, first)
            strided = torch.empty(2, 40, 272, device="cuda", dtype=BF16)[..., :264].copy_(x)  # rows 272 apart
            assert relative_error(torch.ops.wavetune.linear(strided, w, b), first) < TOLERANCE
            assert len(gemm_ops._plans) == 2
            # x's shape and strides, data 2 bytes off: the cached launch reaches the native alignment check
            misaligned = torch.empty(x.numel() + 1, device="cuda", dtype=BF16)[1:].view_as(x)
            with pytest.raises(ValueError, match="16-byte aligned"):
                torch.ops.wavetune.linear(misaligned, w, b)

    def test_patch_on_the_gpu_loads_the_table(self):
        device = torch.cuda.current_device()
        tables.checked_devices().discard(device)
        wavetune.patch(torch.nn.Sequential(torch.nn.Linear(64, 64, device="cuda", dtype=BF16)))
        assert device in tables.checked_devices()

    def test_first_call_under_capture_is_refused(self):
        x, w = tensor(8, 64, device="cuda"), tensor(64, 64, device="cuda")
        device = torch.cuda.current_device()
        tables.checked_devices().discard(device)
        gemm_ops._plans.clear()
        try:
            graph = torch.cuda.CUDAGraph()
            with pytest.raises(RuntimeError, match="under CUDA-graph capture"), torch.cuda.graph(graph):
                torch.ops.wavetune.linear(x, w)
        finally:
            torch.ops.wavetune.linear(x, w)  # an eager call loads the table again
        assert device in tables.checked_devices()
