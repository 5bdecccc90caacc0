"""LoRA weight-space evolution operators: 6 mutations, 9 crossovers, 2 identity controls (docs/architecture.md).

```python
child = populora.operators.apply("M1", parents=[adapter], seed=0, sigma=0.1)   # -> LoRAAdapter
populora.operators.applied_operator(child)   # "M1"; "X5" when X4 declines to extrapolate (metadata["lineage"])
populora.operators.REGISTRY["X3"]   # Operator(name, arity, fn, defaults, kind, summary, dense)
populora.operators.LIVE_OPERATORS   # ("M1", "M2", "M3", "M4", "X1", "X2", "X3", "X4"): the paper's live set
```
Maths: each operator's docstring and docs/operators.md; retention metrics: `populora.operators.retention`.
Imports only torch (and numpy for DELLA's row ranks).
"""

from populora.names import OPERATORS
from populora.operators import crossovers as _crossovers  # noqa: F401  (registers X1-X9, I1, I2)
from populora.operators import mutations as _mutations  # noqa: F401  (registers M1-M6)
from populora.operators.registry import (
    LIVE_OPERATORS,
    REGISTRY,
    Operator,
    OperatorError,
    applied_operator,
    apply,
    get,
)

# Registry order: mutations, crossovers, identity controls (the order of the paper's appendix).
for _k in OPERATORS:
    REGISTRY[_k] = REGISTRY.pop(_k)

__all__ = ["LIVE_OPERATORS", "REGISTRY", "Operator", "OperatorError", "applied_operator", "apply", "get"]
