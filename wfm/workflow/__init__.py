"""Workflow definitions: XML -> checked model -> deployment plan, and when a generation ends.

```python
from wfm.workflow import load, translate
plan = translate(load("workflows/payroll.xml"))
plan.publications()            # the AGENT_CTL publications, per agent in order
```
"""

from wfm.workflow.checks import APPL_END, APPL_START, ON_VALUES
from wfm.workflow.errors import DefinitionError, Problem
from wfm.workflow.generation import outcome, skipped_jobs
from wfm.workflow.loader import load, loads
from wfm.workflow.model import After, Job, Workflow
from wfm.workflow.schedule import DAILY, parse_schedule, schedule_words
from wfm.workflow.translate import Envelope, Plan, encode, translate

__all__ = [
    "APPL_END",
    "APPL_START",
    "DAILY",
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
    "outcome",
    "parse_schedule",
    "schedule_words",
    "skipped_jobs",
    "translate",
]
