"""What sandbox jobs may import and do under each profile (`populora.sandbox.pool.Sandbox(profile=)`): the
standard-library modules every worker pre-imports (`DEFAULT_PRELOAD`) or a job imports on demand
(`LAZY_MODULES`), the evaluation profile's packages and threads (`EVAL_*`), and the host folders that make
such packages importable inside the minimal root (`package_roots`).

Which imports a task *allows* is the tasks package's AST policy, not these lists; `populora.sandbox.pool`
re-exports every name.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

#: Standard-library modules every worker imports before forking jobs. A job that has dropped to `nobody`
#: cannot read the interpreter's files (on machines where they live under /root), so these (and `LAZY_MODULES`)
#: are the modules a job can import. Which imports are *allowed* is the tasks package's AST policy, not ours.
DEFAULT_PRELOAD: tuple[str, ...] = (
    "abc",
    "array",
    "ast",
    "base64",
    "binascii",
    "bisect",
    "calendar",
    "cmath",
    "codecs",
    "collections",
    "collections.abc",
    "contextlib",
    "copy",
    "dataclasses",
    "datetime",
    "_strptime",
    "decimal",
    "difflib",
    "enum",
    "fractions",
    "functools",
    "graphlib",
    "hashlib",
    "heapq",
    "hmac",
    "io",
    "itertools",
    "json",
    "keyword",
    "math",
    "numbers",
    "operator",
    "pprint",
    "re",
    "string",
    "struct",
    "textwrap",
    "time",
    "types",
    "typing",
    "unicodedata",
    "uuid",
    "weakref",
    "zlib",
    "encodings.ascii",
    "encodings.latin_1",
    "encodings.utf_16",
    "encodings.utf_32",
    "encodings.cp1252",
)

#: Modules imported only by the jobs whose source mentions them, in the job's process before it drops its
#: privileges (a few ms for those jobs). They stay out of the warm worker because they register at-fork
#: hooks (`random` reseeds, `threading` rebuilds its state) that would make *every* fork slower (~40% more
#: page faults per job); `statistics` and `secrets` import `random`, `queue` imports `threading`.
LAZY_MODULES: tuple[str, ...] = ("random", "statistics", "secrets", "queue", "threading")

#: The evaluation profile (`Sandbox(profile="eval")`): what the official evalplus lets a solution do, on top of
#: every OS layer of the default ("train") profile. Packages outside the standard library a job may import
#: (bound read-only into the minimal root; `EVAL_PACKAGE_PRELOAD` of them imported in the worker already, so a
#: job pays nothing for them), and how many threads the job uid may run at once (fork and exec stay refused).
EVAL_IMPORT_PACKAGES: tuple[str, ...] = ("numpy",)
EVAL_PACKAGE_PRELOAD: tuple[str, ...] = ("numpy", "numpy.random", "numpy.linalg", "numpy.fft")
EVAL_THREADS = 64
PROFILES = ("train", "eval")


def package_roots(names: Sequence[str]) -> list[str]:
    """The host folders that make packages `names` importable: each package's folder and, for a wheel that
    vendors shared libraries (``numpy.libs``), that folder beside it. Resolved here in the caller, which has
    site-packages (the worker starts without it)."""
    import importlib.util

    roots = []
    for name in names:
        if not name or "." in name:
            raise ValueError(f"import_packages: {name!r} is not a top-level package name (e.g. 'numpy')")
        spec = importlib.util.find_spec(name)
        if spec is None or not spec.submodule_search_locations:
            raise ValueError(
                f"import_packages: package {name!r} is not installed for {sys.executable}; install it or "
                "leave it out of import_packages"
            )
        folder = os.path.realpath(list(spec.submodule_search_locations)[0])
        roots.append(folder)
        libs = folder + ".libs"
        if os.path.isdir(libs):
            roots.append(libs)
    return roots
