"""Where each part of a composite subscription is detected (PADRES's destination tree). Pure.

A broker that receives a composite asks, for each atom, where the publications matching it come
from: all through one neighbour (its destination is that neighbour), or otherwise (``HERE``):
from here, from several directions, or from nowhere yet (no advertisement overlaps it; the
detection stays here when one arrives, see ``composites``). The
destination tree is built bottom-up: a node's destination is its children's when they all agree
on one neighbour, and none otherwise. The composite is then split top-down: a whole composite
whose destination is a neighbour goes there as a unit; otherwise this broker detects the root,
each child subtree with a neighbour destination becomes a remote part (sent there as a unit and
joined here when it fires), and the rest is split further. Atoms are plain subscriptions, routed
like any other, so an atom never needs to travel as a unit; nor does a part that keeps no state
(an ``||`` of atoms): detected remotely it would send one notification per publication, where its
atoms' publications share each link with every other subscription that wants them.

Detection therefore happens where the atoms' sources diverge, and each remote part sends one
notification per firing instead of every publication it consumed.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass
from enum import Enum
from typing import Final

from broker.language.model import Atom, Composite, Filter, Or
from broker.routing.detection import Path, operands

__all__ = ["HERE", "Placement", "Source", "node_at", "place"]


class Source(Enum):
    """Where an atom's publications come from when it is not one neighbour (a neighbour is its id:
    these are not text, so no broker's name can be mistaken for them)."""

    HERE = "here"  # local clients, more than one direction, or no advertisement yet


HERE: Final = Source.HERE


@dataclass(frozen=True, slots=True)
class Placement:
    forward: str | None  # the neighbour the whole composite goes to, or None: detected here
    atoms: tuple[Path, ...] = ()  # atoms subscribed from here
    remote: tuple[tuple[Path, str], ...] = ()  # subtrees detected at a neighbour


def holds_state(node: Composite) -> bool:
    """Whether detecting ``node`` keeps matches waiting: it has an ``&``, ``;`` or ``Times``."""
    return not isinstance(node, Atom | Or) or any(holds_state(child) for child in operands(node))


def node_at(composite: Composite, path: Path) -> Composite:
    node = composite
    for index in path:
        node = operands(node)[index]
    return node


def place(
    composite: Composite, whence: Callable[[Filter], str | Source], upstream: Collection[str] = ()
) -> Placement:
    """Split ``composite`` by destination. ``whence(atom filter)`` is a neighbour id or ``HERE``;
    neighbours in ``upstream`` (where the composite came from) are never destinations."""
    destinations: dict[Path, str | None] = {}

    def destination(node: Composite, path: Path) -> str | None:
        if isinstance(node, Atom):
            source = whence(node.filter)
            found = None if isinstance(source, Source) or source in upstream else source
        else:
            children = {destination(child, (*path, i)) for i, child in enumerate(operands(node))}
            found = children.pop() if len(children) == 1 else None
        destinations[path] = found
        return found

    root = destination(composite, ())
    if root is not None and holds_state(composite):
        return Placement(root)
    atoms: list[Path] = []
    remote: list[tuple[Path, str]] = []

    def split(node: Composite, path: Path) -> None:
        target = destinations[path]
        if isinstance(node, Atom):
            atoms.append(path)
        elif target is not None and path and holds_state(node):
            remote.append((path, target))
        else:
            for i, child in enumerate(operands(node)):
                split(child, (*path, i))

    split(composite, ())
    return Placement(None, tuple(atoms), tuple(remote))
