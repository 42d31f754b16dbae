"""The source of a variant library, for the variants compiled at run time (``wavetune.runtime.jit``), which runs
this as a program of its own so that run time never imports the code generator:

    python -m wavetune.codegen.variant_library CONFIG_SPACE HASH OUT VARIANT...

writes to OUT the library of the named variants of the config-space file CONFIG_SPACE, whose hash must be HASH
(the one the build was compiled from). Exit status 1 with a message on stderr otherwise.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from . import config_space


def chosen_variants(space: config_space.ConfigSpace, expected_hash: str, names: list[str]) -> list:
    """The variants ``names`` of ``space``; a ConfigError where the space is not the build's or lacks one."""
    if space.hash != expected_hash:
        raise config_space.ConfigError(f"the installed config space {space.path} is not the one this build was "
                                       f"compiled from (config space {expected_hash}): reinstall wavetune")
    by_name = {v.name: v for v in space.variants}
    if unknown := [name for name in names if name not in by_name]:
        raise config_space.ConfigError(f"{space.path} has no variant {', '.join(unknown)}")
    return [by_name[name] for name in names]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Write the source of a wavetune variant library.")
    parser.add_argument("config_space", type=Path, help="the family's config-space TOML file")
    parser.add_argument("hash", help="the config-space hash the build was compiled from")
    parser.add_argument("out", type=Path, help="the .cu file to write")
    parser.add_argument("variants", nargs="+", help="variant names")
    args = parser.parse_args(argv)
    try:
        space = config_space.load(args.config_space)
        args.out.write_text(config_space.render_variant_library(space, chosen_variants(space, args.hash,
                                                                                       args.variants)))
    except (config_space.ConfigError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
