"""Workflow definitions: XML -> checked model -> deployment plan.

```python
from wfm.workflow import load, translate
plan = translate(load("workflows/payroll.xml"))
plan.publications()            # the AGENT_CTL publications, per agent in order
```
"""

from wfm.workflow.checks import ON_VALUES
from wfm.workflow.errors import DefinitionError, Problem
from wfm.workflow.loader import load, loads
from wfm.workflow.model import After, Job, Workflow
from wfm.workflow.translate import Envelope, Plan, encode, translate

__all__ = [
    "ON_VALUES",
    "After",
    "DefinitionError",
    "Envelope",
    "Job",
    "Plan",
    "Problem",
    "Workflow",
    "encode",
    "load",
    "loads",
    "translate",
]
