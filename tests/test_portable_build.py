"""The installed kernel library ships the portable kernels as compute_80 PTX (CMakeLists.txt,
WAVETUNE_PORTABLE_SOURCES), which the driver JIT-compiles on any GPU since Ampere, and nothing else as PTX.
Read from the library's fatbinaries without a GPU or cuobjdump (the PTX with the zstd command)."""

from __future__ import annotations

import re
import shutil
import struct
import subprocess
from pathlib import Path

import pytest

import wavetune

FATBIN_MAGIC = 0xBA55ED50
PTX, CUBIN = 1, 2
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"  # nvcc compresses PTX with zstd
# Kernels of the portable sources (mangled names hold them).
PORTABLE_KERNELS = ["rms_norm_kernel", "silu_and_mul_kernel", "rotary_kernel", "moe_align_kernel",
                    "moe_gather_kernel", "moe_combine_kernel", "paged_attention_kernel", "merge_splits_kernel",
                    "merge_rows_kernel", "order_sequences_kernel", "rescale_product", "transpose_scales"]
# Instructions that exist from sm_90 on: in compute_80 PTX the driver's JIT would refuse the whole module.
HOPPER_INSTRUCTIONS = ["griddepcontrol", "barrier.cluster", "mapa", "wgmma", "setmaxnreg", "cp.async.bulk"]


def section(elf: bytes, wanted: str) -> bytes:
    """The contents of a 64-bit little-endian ELF file's section `wanted`."""
    header_at = struct.unpack_from("<Q", elf, 0x28)[0]
    entry_size, count, names_index = struct.unpack_from("<HHH", elf, 0x3A)
    headers = [struct.unpack_from("<IIQQQQ", elf, header_at + i * entry_size) for i in range(count)]
    names_at = headers[names_index][4]
    for name, _, _, _, offset, size in headers:
        if elf[names_at + name: elf.index(b"\0", names_at + name)].decode() == wanted:
            return elf[offset: offset + size]
    raise AssertionError(f"no section {wanted}")


def fatbins(data: bytes) -> list[dict[tuple[int, int], bytes]]:
    """The concatenated fatbinaries in `data` (one per translation unit): {(kind, architecture): payload}."""
    found, at = [], 0
    while at + 16 <= len(data):
        magic, _, header, size = struct.unpack_from("<IHHQ", data, at)
        if magic != FATBIN_MAGIC:
            at += 8  # padding between fatbinaries
            continue
        entry, end, entries = at + header, at + header + size, {}
        while entry < end:
            kind, _, entry_header, padded, _, payload = struct.unpack_from("<HHIIII", data, entry)
            arch = struct.unpack_from("<I", data, entry + 28)[0]
            # A compressed payload's own size, 0 for one stored as it is
            entries[kind, arch] = data[entry + entry_header: entry + entry_header + (payload or padded)]
            entry += entry_header + padded
        found.append(entries)
        at = end
    return found


def ptx_text(payload: bytes) -> str:
    if payload.startswith(ZSTD_MAGIC):
        if not shutil.which("zstd"):
            pytest.skip("the PTX is zstd-compressed and no zstd command is on PATH")
        payload = subprocess.run(["zstd", "-dc"], input=payload, capture_output=True,
                                 check=True).stdout
    return payload.decode()


@pytest.fixture(scope="module")
def units():
    if not wavetune.build_info()["kernels_compiled"]:
        pytest.skip("the package was built without CUDA: no kernel library")
    (library,) = (Path(wavetune.__file__).parent / "lib").glob("libwavetune_kernels.so.*")
    return fatbins(section(library.read_bytes(), ".nv_fatbin"))


def test_sm90a_cubins_everywhere_and_compute_80_ptx_only_for_the_portable_kernels(units):
    assert all((CUBIN, 90) in unit for unit in units)
    assert {key for unit in units for key in unit if key[0] == PTX} == {(PTX, 80)}
    portable = [unit[CUBIN, 90] for unit in units if (PTX, 80) in unit]
    assert [k for k in PORTABLE_KERNELS if not any(k.encode() in cubin for cubin in portable)] == []
    # The CUTLASS 3 kernels (wgmma, TMA: sm_90a only, cutlass::device_kernel) are in units without PTX; the
    # multistage variants of a kernel set that has them (CUTLASS 2.x: the dense GEMM's cutlass::Kernel2, the
    # grouped GEMM's cutlass::Kernel) ship PTX.
    ampere_kernels = (b"_ZN7cutlass7Kernel2", b"_ZN7cutlass6Kernel")
    assert [cubin for cubin in portable if b"cutlass" in cubin and not any(k in cubin for k in ampere_kernels)] == []
    assert not any(b"_ZN7cutlass13device_kernel" in cubin for cubin in portable)
    assert any(b"cutlass" in unit[CUBIN, 90] for unit in units if (PTX, 80) not in unit)
    for listing, kernel in ((wavetune.configs, ampere_kernels[0]), (wavetune.grouped_configs, ampere_kernels[1])):
        multistage = [v for v in listing() if v.schedule == "multistage"]
        assert bool(multistage) == any(kernel in cubin for cubin in portable), listing.__name__


def test_the_compute_80_ptx_holds_no_hopper_instruction(units):
    ptx = "\n".join(ptx_text(unit[PTX, 80]) for unit in units if (PTX, 80) in unit)
    kernels = re.findall(r"\.entry\s+(\w+)", ptx)
    assert [k for k in PORTABLE_KERNELS if not any(k in name for name in kernels)] == []
    code = re.sub(r"//.*", "", ptx)
    assert [i for i in HOPPER_INSTRUCTIONS if re.search(rf"\b{re.escape(i)}\b", code)] == []
