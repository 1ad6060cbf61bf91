"""The bench suites' unstrided, ungrouped 2D layers, one a line, for tools/tap_run_balance.cc:
"suite N OH OW CIN COUT FH FW PAD_TOP PAD_LEFT".

python tools/suite_layers.py paper real
"""

import sys

from winrs_jax.bench.suite import SUITES


def main(names: list[str]) -> None:
    for name in names:
        for shape in SUITES[name]:
            if len(shape.filter) != 2 or shape.groups != 1 or shape.stride != 1:
                continue
            (pad_top, _), (pad_left, _) = shape.padding
            print(name, shape.n, *shape.out_spatial, shape.cin, shape.cout, *shape.filter, pad_top, pad_left)


if __name__ == "__main__":
    main(sys.argv[1:] or ["paper", "real"])
