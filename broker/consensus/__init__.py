"""A site's replicated log: Raft among the brokers of one site, as pure code (no I/O).

```python
log = SiteLog(directory)
found = log.load()                   # term and vote, snapshot (restore the state machine), entries
node = Node(Config("b1", ("b1", "b2", "b3")), now, random.random, found.state, found.entries,
            snapshot=found.snapshot)
node.handle("b2", message, now)      # or node.tick(now), node.propose(data, now)
ready = node.ready()                 # write, fsync, send, restore, apply: in that order
node.advance(now)
log.compact(node.compact(applied, machine_bytes))  # now and then: the log stays short
```
"""

from broker.consensus.entries import Entries
from broker.consensus.node import Config, Node, NotLeader, Ready, Role
from broker.consensus.storage import Recovered, SiteLog
from broker.messages.consensus import (
    Append,
    AppendReply,
    ConsensusMessage,
    Entry,
    HardState,
    InstallSnapshot,
    Snapshot,
    VoteReply,
    VoteRequest,
)

__all__ = [
    "Append",
    "AppendReply",
    "Config",
    "ConsensusMessage",
    "Entries",
    "Entry",
    "HardState",
    "InstallSnapshot",
    "Node",
    "NotLeader",
    "Ready",
    "Recovered",
    "Role",
    "SiteLog",
    "Snapshot",
    "VoteReply",
    "VoteRequest",
]
