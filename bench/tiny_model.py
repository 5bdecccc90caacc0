"""What the bundled tiny model can do as teacher and student; same as `populora bench tiny-model [--quick]`."""

import sys

from populora.pretrain.bench import run

if __name__ == "__main__":
    run(quick="--quick" in sys.argv[1:])
