"""A site's replicated log: Raft among the brokers of one site, as pure code (no I/O).

```python
node = Node(Config("b1", ("b1", "b2", "b3")), now, random.random, state, entries)
node.handle("b2", message, now)      # or node.tick(now), node.propose(data, now)
ready = node.ready()                 # write, fsync, send, apply: in that order
node.advance(now)
```
"""

from broker.consensus.entries import Entries
from broker.consensus.messages import (
    Append,
    AppendReply,
    ConsensusMessage,
    Entry,
    HardState,
    VoteReply,
    VoteRequest,
)
from broker.consensus.node import Config, Node, NotLeader, Ready, Role

__all__ = [
    "Append",
    "AppendReply",
    "Config",
    "ConsensusMessage",
    "Entries",
    "Entry",
    "HardState",
    "Node",
    "NotLeader",
    "Ready",
    "Role",
    "VoteReply",
    "VoteRequest",
]
