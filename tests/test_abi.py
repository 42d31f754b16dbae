"""The C++ libraries' ABI version (csrc/include/wavetune/version.h) follows their public headers, and names
the installed libraries' files and SONAMEs, so that a program built against other headers fails to load
instead of misreading a changed struct."""

from __future__ import annotations

import hashlib
import re
import shutil
import subprocess
from pathlib import Path

import pytest

import wavetune

from conftest import REPO

HEADERS = REPO / "csrc" / "include" / "wavetune"
# The public headers' digest (comments and spacing aside) at each ABI version. A change to the headers
# needs a new entry here and WAVETUNE_ABI_VERSION raised to it.
DIGESTS = {1: "0789c750ace17363", 2: "e2629f9ccaddf0ca", 3: "ade3510a3d1da77e", 4: "0259225fd2f5a9e6",
           5: "5c5565344eed9ab5", 6: "b1b55a0e45013215", 7: "5787ab7a02913a25",
           8: "3ce619a0ea844c56", 9: "b5623ae7cbf2052c", 10: "441b6e70d628dcd3",
           11: "bcb5738845468c29", 12: "5af444d1c0c60097", 13: "27d21578b349f0c3",
           14: "1347c4c9c4fbd084", 15: "38e0e56d1bc37def", 16: "591a730548565248",
           17: "e0c7302d480b957f", 18: "4a4843a1d2da4669",
           19: "8ca72b7db79740c4", 20: "f583af4289e5540f", 21: "7405b0f0bb490d5e",
           22: "98549651f733066a", 23: "f3e455c129115a45", 24: "2f9fddd2a7db0793",
           25: "9cbad12f1971b2f4", 26: "f2ef10d5e01c9bdf"}


# NOTES: the grouped GEMM's scales modes (grouped.h: GroupedScales' enumerators, kGroupedScales' layouts) are
# append-only: a mode appended changes no struct, signature or existing mode's value, and each library reads its
# own copy of the list (hidden symbols), so programs built against fewer modes keep working. The digest takes the
# modes of the current ABI version and leaves out those appended since.
ABI_GROUPED_MODES = 3


def abi_modes(text: str) -> str:
    """``text`` (a header, comments and spacing aside) with GroupedScales' modes cut to the ABI's."""
    def first(match, items):
        return f"{match.group(1)} {', '.join(items[:ABI_GROUPED_MODES])} {match.group(3)}"

    text = re.sub(r"(enum class GroupedScales : int32_t \{)([^}]*)(\})",
                  lambda m: first(m, [item.strip() for item in m.group(2).split(",") if item.strip()]), text)
    return re.sub(r"(kGroupedScales\[\] = \{)((?: ?\{[^{}]*\},?)*)( ?\})",
                  lambda m: first(m, re.findall(r"\{[^{}]*\}", m.group(2))), text)


def headers_digest() -> str:
    digest = hashlib.sha256()
    for path in sorted(HEADERS.glob("*.h")):
        if path.name == "version.h":
            continue
        text = abi_modes(" ".join(re.sub(r"//[^\n]*", "", path.read_text()).split()))
        digest.update(path.name.encode() + b"\0" + text.encode() + b"\0")
    return digest.hexdigest()[:16]


def abi_version() -> int:
    return int(re.search(r"#define WAVETUNE_ABI_VERSION (\d+)", (HEADERS / "version.h").read_text()).group(1))


def test_the_abi_version_follows_the_headers():
    assert max(DIGESTS) == abi_version() and len(set(DIGESTS.values())) == len(DIGESTS)
    assert headers_digest() == DIGESTS[abi_version()], (
        f"the public C++ headers changed (digest {headers_digest()}): raise WAVETUNE_ABI_VERSION in "
        f"{HEADERS / 'version.h'} and add the digest to DIGESTS")


@pytest.mark.parametrize("library", ["libwavetune_kernels", "libwavetune_lookup"])
def test_installed_libraries_carry_it_in_name_and_soname(library):
    path = Path(wavetune.__file__).parent / "lib" / f"{library}.so.{abi_version()}"
    assert path.is_file(), f"{path.name} is not installed"
    if shutil.which("readelf") is None:
        pytest.skip("readelf (binutils) is not installed")
    dynamic = subprocess.run(["readelf", "-d", str(path)], capture_output=True, text=True, check=True).stdout
    assert f"Library soname: [{path.name}]" in dynamic
