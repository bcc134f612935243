"""The message language: text <-> immutable model, with one error type.

```python
p = parse_publication("[class,stock],[price,100]")
f = parse_filter("[class,eq,stock],[price,>,99]")
c = parse_composite("{{[class,eq,a],[x,eq,$S$X]}&{[class,eq,b],[x,eq,$S$X]}}")
```
"""

from broker.errors import ParseError
from broker.language.model import (
    MAX_DEPTH,
    And,
    Atom,
    Composite,
    Filter,
    Or,
    Policy,
    Predicate,
    Publication,
    Sequence,
    Times,
)
from broker.language.parser import (
    parse_composite,
    parse_composite_subscription,
    parse_filter,
    parse_publication,
)
from broker.language.values import TimeRef, Value, Var

__all__ = [
    "MAX_DEPTH",
    "And",
    "Atom",
    "Composite",
    "Filter",
    "Or",
    "ParseError",
    "Policy",
    "Predicate",
    "Publication",
    "Sequence",
    "TimeRef",
    "Times",
    "Value",
    "Var",
    "parse_composite",
    "parse_composite_subscription",
    "parse_filter",
    "parse_publication",
]
