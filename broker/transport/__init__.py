"""Broker links on the wire: the frame codec (pure) and its errors; the frames themselves are
:mod:`broker.messages`.

```python
frame = encode(Publish("p1", publication))
for payload in FrameDecoder().feed(frame):
    message = decode(payload)
```
"""

from broker.errors import BadMessage, FrameTooLarge, ProtocolError
from broker.transport.codec import MAX_FRAME, FrameDecoder, decode, encode

__all__ = [
    "MAX_FRAME",
    "BadMessage",
    "FrameDecoder",
    "FrameTooLarge",
    "ProtocolError",
    "decode",
    "encode",
]
