"""Detecting composite subscriptions: which combinations of publications complete a composite.

A ``Detector`` holds the join state of one composite subscription and is fed publications that
matched its atoms (the router knows which, from its matcher): ``feed(leaf, publication, now)``
returns the firings that publication completes. Pure: no clock, ``now`` is a value.

In distributed detection a subtree of the composite may be detected by another broker: built with
``remote=[path, ...]``, the detector treats those subtrees as leaves fed whole firings
(``feed_match``) with the bindings the remote detector made. Leaves are numbered in the order a
depth-first walk meets them; without remote subtrees, leaf ``i`` is atom ``i`` of
``composite.atoms()``. A path is the operand indexes from the root (a ``Times``' operand is 0).

Semantics (docs/composites.md, Semantics):

* an atom's match binds its variables to the publication's values;
* ``||`` passes on every match of any operand, so it fires once per matching publication;
* ``&`` completes when every operand has a match and all bindings agree; a single publication
  may satisfy several atoms and complete an ``&`` by itself;
* ``;`` is ``&`` in order of arrival: each operand's match arrived after the previous one's;
* ``Times(S, N, ATTR, STEP)`` completes with N matches of S whose ATTR grows by STEP each time.

Which waiting matches a completion uses, and whether it consumes them, is the subscription's
``Policy`` (Snoop's parameter contexts and PADRES's, see ``broker.language.model.Policy``); by
default (``chronicle``) a combination fires once and its constituents are consumed, oldest
waiting match first. ``Times`` consumes its run under every policy. Waiting state is kept per
match, is bounded under every policy (``max_waiting`` matches, oldest dropped first, and
``max_age`` seconds), and ``clear(bindings)`` drops everything waiting under those bindings: the
workflow layer clears a generation when its ``APPL_END`` arrives, so memory does not grow with the
number of finished generations.

What one arrival costs is bounded too, over every node it climbs through (a ``_Budget``): the
policies that fire every combination make at most ``max_waiting`` combinations in all (a nested
join would otherwise multiply one node's combinations by the next's), every search tests at most
``SEARCH_LIMIT`` waiting matches in all, and a ``cumulative`` firing gathers at most
``MAX_FIRING_PUBLICATIONS`` publications and ``MAX_FIRING_WEIGHT`` of them (it must fit in one
frame to its subscriber): the matches it leaves out wait for the next completion. Each arrival
cut is counted in ``truncated``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from itertools import count

from broker.language.model import Atom, Composite, Or, Policy, Publication, Sequence, Times
from broker.language.values import Value, Var

__all__ = ["Bindings", "Detector", "Match", "Path", "operands"]

Bindings = tuple[tuple[str, Value], ...]  # sorted by variable name
Path = tuple[int, ...]

# Waiting matches one arrival may test in looking for its completions, at all nodes together: a
# search among thousands of waiting matches whose variables agree pairwise but never all at once
# stops here, not a broker.
SEARCH_LIMIT = 100_000
# What one cumulative firing gathers at most: its Notify must fit in a frame (1 MiB, of which
# ``Publication.weight``'s estimate may undercount a third) with room for the bindings.
MAX_FIRING_PUBLICATIONS = 1_000
MAX_FIRING_WEIGHT = 512 << 10


def operands(node: Composite) -> tuple[Composite, ...]:
    """The children of a composite node, in the order paths number them."""
    if isinstance(node, Atom):
        return ()
    if isinstance(node, Times):
        return (node.operand,)
    return node.operands


@dataclass(frozen=True, slots=True)
class Match:
    """A (partial) combination: the publications in it, what they bound, and when they arrived."""

    bindings: Bindings
    publications: tuple[Publication, ...]
    first: int  # arrival number of its earliest publication
    last: int  # and of its latest
    at: float  # ``now`` when its latest publication arrived


def _merge(a: Bindings, b: Bindings) -> Bindings | None:
    """Both bindings together, or None if they disagree on a shared variable."""
    merged = dict(a)
    for name, value in b:
        if merged.setdefault(name, value) != value:
            return None
    return tuple(sorted(merged.items()))


def _agrees(bindings: Bindings, wanted: dict[str, Value]) -> bool:
    return all(wanted.get(name, value) == value for name, value in bindings)


def _weight(match: Match) -> int:
    return sum(p.weight() for p in match.publications)


@dataclass(slots=True)
class _Budget:
    """What one arrival may still spend, shared by every node it climbs through: a limit per
    node would let a nested join multiply its children's combinations (300 x 300 firings of one
    publication under ``unrestricted``)."""

    combinations: int
    tests: int
    cut: bool = False  # a limit bit: some completions were not looked for

    def test(self) -> bool:
        """Whether one more waiting match may be tested."""
        if self.tests == 0:
            self.cut = True
            return False
        self.tests -= 1
        return True


class _Node:
    """A node of the composite tree; matches flow from the atoms up to the root."""

    def __init__(self, detector: Detector) -> None:
        self.detector = detector
        self.parent: _Node | None = None
        self.slot = 0  # which operand of the parent this node is

    def offer(self, child: int, match: Match, budget: _Budget) -> list[Match]:
        """A match of operand ``child``; returns the matches of this node it completes."""
        raise NotImplementedError

    def waiting(self) -> list[list[Match]]:
        """The lists of matches this node keeps waiting."""
        return []


class _LeafNode(_Node):
    """An atom, or (``variables`` None) a subtree detected elsewhere."""

    def __init__(self, detector: Detector, atom: Atom | None) -> None:
        super().__init__(detector)
        self.variables = (
            None
            if atom is None
            else {p.attribute: p.value.name for p in atom.filter.predicates if isinstance(p.value, Var)}
        )


class _OrNode(_Node):
    def offer(self, child: int, match: Match, budget: _Budget) -> list[Match]:
        return [match]


class _AndNode(_Node):
    """Also ``;`` when ``ordered``: operand i's match must have arrived after operand i-1's. The
    detector's policy says which waiting matches a completion uses and which it consumes."""

    def __init__(self, detector: Detector, size: int, ordered: bool) -> None:
        super().__init__(detector)
        self.stores: list[list[Match]] = [[] for _ in range(size)]
        self.ordered = ordered

    def waiting(self) -> list[list[Match]]:
        return self.stores

    def offer(self, child: int, match: Match, budget: _Budget) -> list[Match]:
        last = len(self.stores) - 1
        policy = self.detector.policy
        completions = self._complete(child, match, budget) if not self.ordered or child == last else []
        keeps = policy in (Policy.RECENT, Policy.UNRESTRICTED)
        if (keeps or not completions) and (not self.ordered or child != last):
            self._keep(child, match)  # a last step of a sequence can never complete later
        if completions and not keeps:
            for i, store in enumerate(self.stores):
                used = {id(m) for groups, _ in completions for m in groups[i]} if i != child else set()
                if len(used) == 1:  # chronicle's: the oldest that fits, found by identity
                    del store[next(k for k, m in enumerate(store) if id(m) in used)]
                elif used:  # cumulative's, up to thousands: in one pass
                    store[:] = [m for m in store if id(m) not in used]
                self.detector._waiting -= len(used)
        return [
            Match(
                bindings,
                tuple(p for group in groups for m in group for p in m.publications),
                min(m.first for group in groups for m in group),
                max(m.last for group in groups for m in group),
                match.at,
            )
            for groups, bindings in completions
        ]

    def _keep(self, child: int, match: Match) -> None:
        store = self.stores[child]
        if self.detector.policy is Policy.RECENT:  # the newest match per bindings replaces the rest
            stale = [m for m in store if m.bindings == match.bindings]
            for m in stale:
                store.remove(m)
            self.detector._waiting -= len(stale)
        self.detector._store(store, match)

    def _order(self, child: int) -> list[int]:
        """The other operands, in the order a completion picks them: backwards from ``child`` in a
        sequence (each must precede the one after it), all but ``child`` otherwise."""
        if self.ordered:
            return list(range(child - 1, -1, -1))
        return [i for i in range(len(self.stores)) if i != child]

    def _complete(
        self, child: int, match: Match, budget: _Budget
    ) -> list[tuple[list[list[Match]], Bindings]]:
        """The completions ``match`` makes with waiting matches: per operand the matches used
        (one each, or under ``cumulative`` all that agree), and the bindings of all of them."""
        policy = self.detector.policy
        if policy is Policy.CUMULATIVE:
            gathered = self._gather(child, match, budget)
            return [] if gathered is None else [gathered]
        limit = 1 if policy in (Policy.CHRONICLE, Policy.RECENT) else budget.combinations
        if limit == 0:
            budget.cut = True
            return []
        order = self._order(child)
        candidates = [self.stores[i][::-1] if policy is Policy.RECENT else self.stores[i] for i in order]
        chosen: list[Match] = [match] * len(self.stores)  # overwritten for every operand but child
        bindings = [match.bindings]  # bindings[d]: those of the operands chosen before depth d
        positions = [0] * (len(order) + 1)
        found: list[tuple[list[list[Match]], Bindings]] = []
        depth = 0
        while depth >= 0:  # a depth-first search without recursion: an & may have many operands
            if depth == len(order):
                found.append(([[m] for m in chosen], bindings[depth]))
                if len(found) == limit:
                    break
                depth -= 1
                continue
            i, step = order[depth], None
            while positions[depth] < len(candidates[depth]) and step is None and budget.test():
                candidate = candidates[depth][positions[depth]]
                positions[depth] += 1
                if self.ordered and candidate.last >= chosen[i + 1].first:
                    continue
                step = _merge(bindings[depth], candidate.bindings)
                if step is not None:
                    chosen[i] = candidate
            if budget.cut:
                break
            if step is None:
                depth -= 1
                continue
            del bindings[depth + 1 :]
            bindings.append(step)
            depth += 1
            positions[depth] = 0
        if policy in (Policy.CONTINUOUS, Policy.UNRESTRICTED):
            budget.combinations -= len(found)
            if budget.combinations == 0:
                budget.cut = True  # perhaps more: counted, so a cap that bites is visible
        return found

    def _gather(self, child: int, match: Match, budget: _Budget) -> tuple[list[list[Match]], Bindings] | None:
        """``cumulative``: every waiting match that agrees, operand by operand, oldest first, as
        long as the firing stays within ``MAX_FIRING_PUBLICATIONS`` and ``MAX_FIRING_WEIGHT`` (each
        operand gets its first agreeing match whatever it weighs); None if an operand has none.
        In a sequence each step's matches precede the latest of the next step's."""
        groups: list[list[Match]] = [[] for _ in self.stores]
        groups[child] = [match]
        bindings = match.bindings
        publications, weight = len(match.publications), _weight(match)
        for i in self._order(child):
            bound = max(m.first for m in groups[i + 1]) if self.ordered else None
            for candidate in self.stores[i]:
                if not budget.test():
                    break
                merged = _merge(bindings, candidate.bindings)
                if merged is None or (bound is not None and candidate.last >= bound):
                    continue
                more = _weight(candidate)
                if groups[i] and (
                    publications + len(candidate.publications) > MAX_FIRING_PUBLICATIONS
                    or weight + more > MAX_FIRING_WEIGHT
                ):
                    budget.cut = True
                    break
                groups[i].append(candidate)
                bindings = merged
                publications, weight = publications + len(candidate.publications), weight + more
            if not groups[i]:
                return None
        return groups, bindings


class _TimesNode(_Node):
    """Runs of matches whose ATTR values step by STEP; a run of N completes."""

    def __init__(self, detector: Detector, times: Times) -> None:
        super().__init__(detector)
        self.count, self.attribute, self.step = times.count, times.attribute, times.step
        self.runs: list[list[Match]] = []

    def waiting(self) -> list[list[Match]]:
        return self.runs

    def _value(self, match: Match) -> Value | None:
        for publication in reversed(match.publications):
            if self.attribute in publication:
                return publication[self.attribute]
        return None

    def offer(self, child: int, match: Match, budget: _Budget) -> list[Match]:
        value = self._value(match)
        if isinstance(value, str) or value is None:
            return []
        self.runs = [run for run in self.runs if run]  # emptied by clear() or by the size bound
        for run in self.runs:
            previous = self._value(run[-1])
            merged = _merge(run[-1].bindings, match.bindings)
            if merged is not None and not isinstance(previous, str) and value == previous + self.step:  # type: ignore[operator]
                run.append(Match(merged, match.publications, match.first, match.last, match.at))
                break
        else:
            run = [match]
            self.runs.append(run)
        self.detector._waiting += 1
        if len(run) < self.count:
            self.detector._bound()
            return []
        self.runs.remove(run)
        self.detector._waiting -= len(run)
        publications = tuple(p for m in run for p in m.publications)
        return [Match(run[-1].bindings, publications, run[0].first, match.last, match.at)]


class Detector:
    """The join state of one composite subscription."""

    def __init__(
        self,
        composite: Composite,
        max_waiting: int = 10_000,
        max_age: float | None = None,
        remote: Iterable[Path] = (),
        policy: Policy = Policy.CHRONICLE,
    ) -> None:
        self.composite = composite
        self.max_waiting = max_waiting
        self.max_age = max_age
        self.policy = policy
        self.leaves: list[_LeafNode] = []
        self.paths: list[Path] = []  # of each leaf
        self.nodes: list[_Node] = []
        self.dropped = 0
        self.truncated = 0  # arrivals whose completions were cut by their budget
        self._waiting = 0
        self._arrivals = count()
        self._remote = frozenset(remote)
        self._build(composite, ())

    def _build(self, node: Composite, path: Path) -> _Node:
        if isinstance(node, Atom) or path in self._remote:
            leaf = _LeafNode(self, node if isinstance(node, Atom) else None)
            self.leaves.append(leaf)
            self.paths.append(path)
            return leaf
        built: _Node
        if isinstance(node, Times):
            built, operands = _TimesNode(self, node), [node.operand]
        elif isinstance(node, Or):
            built, operands = _OrNode(self), list(node.operands)
        else:
            built, operands = (
                _AndNode(self, len(node.operands), isinstance(node, Sequence)),
                list(node.operands),
            )
        self.nodes.append(built)
        for slot, operand in enumerate(operands):
            child = self._build(operand, (*path, slot))
            child.parent, child.slot = built, slot
        return built

    @property
    def holds_state(self) -> bool:
        """Whether any match ever waits here (an ``||`` of atoms and remote parts never does), so
        whether a clear condition means anything to this detector."""
        return any(isinstance(node, _AndNode | _TimesNode) for node in self.nodes)

    @property
    def waiting(self) -> int:
        """Matches waiting for partners: the memory this detector holds."""
        return self._waiting

    def feed(self, leaf: int, publication: Publication, now: float) -> list[Match]:
        """``publication`` matched the atom that is leaf ``leaf``; returns the firings it completes."""
        variables = self.leaves[leaf].variables
        if variables is None:
            raise ValueError(f"leaf {leaf} is detected remotely: feed_match it")
        if any(attr not in publication for attr in variables):
            return []
        bindings = _merge((), tuple((name, publication[attr]) for attr, name in variables.items()))
        if bindings is None:  # one variable twice in an atom, with two values
            return []
        return self._climb(leaf, bindings, (publication,), now)

    def feed_match(
        self, leaf: int, publications: tuple[Publication, ...], bindings: Bindings, now: float
    ) -> list[Match]:
        """The remote subtree at leaf ``leaf`` fired with these publications and bindings."""
        if self.leaves[leaf].variables is not None:
            raise ValueError(f"leaf {leaf} is an atom: feed it")
        return self._climb(leaf, tuple(sorted(bindings)), publications, now)

    def _climb(
        self, leaf: int, bindings: Bindings, publications: tuple[Publication, ...], now: float
    ) -> list[Match]:
        self._expire(now)
        arrival = next(self._arrivals)
        matches = [Match(bindings, publications, arrival, arrival, now)]
        node: _Node = self.leaves[leaf]
        budget = _Budget(self.max_waiting, SEARCH_LIMIT)
        while matches and node.parent is not None:
            parent = node.parent
            matches = [out for m in matches for out in parent.offer(node.slot, m, budget)]
            node = parent
        self.truncated += budget.cut
        return matches

    def clear(self, bindings: dict[str, Value]) -> int:
        """Drop every waiting match whose bindings agree with ``bindings``; returns how many."""
        removed = 0
        for node in self.nodes:
            for store in node.waiting():
                keep = [m for m in store if not _agrees(m.bindings, bindings)]
                removed += len(store) - len(keep)
                store[:] = keep
        self._waiting -= removed
        return removed

    def _store(self, store: list[Match], match: Match) -> None:
        store.append(match)
        self._waiting += 1
        self._bound()

    def _bound(self) -> None:
        while self._waiting > self.max_waiting:
            stores = [s for node in self.nodes for s in node.waiting() if s]
            min(stores, key=lambda s: s[0].first).pop(0)
            self._waiting -= 1
            self.dropped += 1

    def _expire(self, now: float) -> None:
        if self.max_age is None or not self._waiting:
            return
        for node in self.nodes:
            for store in node.waiting():
                keep = [m for m in store if now - m.at <= self.max_age]
                if len(keep) != len(store):
                    self._waiting -= len(store) - len(keep)
                    self.dropped += len(store) - len(keep)
                    store[:] = keep
