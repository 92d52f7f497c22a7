"""Checkers generated from TypedDicts: checker(t, bounds) compiles the
annotations of a TypedDict (the same ones graphsignal.signals_schema
turns into the JSON Schema) into one function that checks a decoded
JSON document against them, and raises Invalid with one message saying
where (a path: metrics[3].stats.frames[0].value) and what was wrong.
graphsignal-server checks every upload so (graphsignal.upload_model).

What an annotation accepts, by JSON's types as a decoder gives them
(exact types: a bool is no integer, an integer is a number):

  str, int, bool, None    a string, an integer, true or false, null
  float                   any number
  Literal[a, b]           one of these values
  Optional, Union         one of the alternatives, told apart by the
                          value's JSON type; a union of TypedDicts by a
                          key whose annotation is a Literal in each (a tag,
                          such as a metric's "type"), else by a required
                          key only one of them has
  List[X], Tuple[X, Y]    an array of X; an array of exactly X, Y
  Dict[str, X]            an object of X
  TypedDict               an object with its required keys, each known key
                          of its type; other keys pass as they are (a newer
                          sender's additions) unless closed
  Any                     anything

Bounds, looked up when a field is compiled, first by "Type.field", then
by the field's name alone; "Type.field[]" bounds an array's items or an
object's values; then the defaults by type (str, int). A Bound is the
fewest and most characters of a string, items of an array or keys of an
object, or an integer's least and largest value; keys bounds an
object's keys' lengths; like names a sibling array this one must be as
long as.

The checks run in the document's order, keys in the TypedDict's order;
a missing required key is reported after the keys that are present.

The checker is generated code: each TypedDict, array and object becomes
one Python function (exec'd once, at checker()), with every scalar test
written inline as an expression, so a 50,000-series upload is checked
without a call per number; a path is made only when a check fails.
This module imports nothing of graphsignal.
"""
import re
import typing
from typing import Any, Callable, Dict, List, Mapping, NamedTuple, Optional, Tuple

__all__ = ["Invalid", "Bound", "checker"]

Check = Callable[[Any], None]


class Invalid(ValueError):
    """A document that is not of the type; the message names where."""


class Bound(NamedTuple):
    least: Optional[int] = None  # characters, items or keys; an integer's least value (None: unbounded)
    most: Optional[int] = None  # ... most; an integer's largest value (None: unbounded)
    keys: Optional["Bound"] = None  # an object's keys, their characters
    like: Optional[str] = None  # a sibling key: an array as long as that one


_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_MISSING = object()


class _Fail(Exception):
    """A check that failed, on its way out: what is wrong, and the path to
    it, one segment per container it passed (innermost first)."""

    def __init__(self, what: str, sibling: Optional[str] = None) -> None:
        Exception.__init__(self, what)
        self.what = what
        self.segments: List[str] = []
        self.sibling = sibling  # a key beside the failed one, named in the message

    def at(self, segment: str) -> "_Fail":
        self.segments.append(segment)
        return self

    def message(self) -> str:
        path = "".join(reversed(self.segments)).lstrip(".")
        what = self.what
        if self.sibling is not None:
            what = what % ("".join(reversed(self.segments[1:])) + self.sibling).lstrip(".")
        return "%s %s" % (path or "the document", what)


def _key(key: str) -> str:
    """A path's segment for an object's key."""
    return "." + key if _IDENT.match(key) else "[%r]" % key[:40]


def _index(i: int) -> str:
    return "[%d]" % i


def _value(key: str) -> str:
    """A path's segment for a value of a Dict[str, X]."""
    return "[%r]" % key[:40]


def _number(n: int) -> str:
    for bits in (64, 63):
        if n == (1 << bits) - 1:
            return "2^%d-1" % bits
    return str(n)


def _is_typeddict(t: Any) -> bool:
    return isinstance(t, type) and issubclass(t, dict) and hasattr(t, "__required_keys__")


def _shown(v: Any) -> str:
    text = repr(v) if not isinstance(v, (list, dict)) else ("an array" if isinstance(v, list) else "an object")
    return text[:60]


def _one_of(words: str, v: Any) -> str:
    return "must be one of %s, got %s" % (words, _shown(v))


class _Node(NamedTuple):
    """A compiled annotation: the name of its check function in the
    generated namespace; or, for a scalar, `bad`, an expression over {x}
    that is true when x is not of it (written inline where it is used);
    what it wants, in words (after "must be"); the Python types of the
    JSON values it takes."""

    fn: Optional[str]
    bad: Optional[str]
    what: str
    types: Tuple[type, ...]


class _Compiler:
    def __init__(self, bounds: Mapping[str, Bound], closed: bool, defaults: Mapping[Any, Bound]) -> None:
        self.bounds = bounds
        self.closed = closed
        self.defaults = defaults
        self.ns: Dict[str, Any] = {"_Fail": _Fail, "_M": _MISSING, "_key": _key, "_index": _index,
                                   "_value": _value, "_one_of": _one_of}
        self.done: Dict[Any, str] = {}
        self.flat: Dict[str, List[str]] = {}  # the bodies of TypedDicts of scalars only, over v: inlined in loops
        self.n = 0

    def bound(self, name: str) -> Optional[Bound]:
        """The bound of "Type.field" (or "Type.field[]"), else of the field's name."""
        if name in self.bounds:
            return self.bounds[name]
        return self.bounds.get(name.partition(".")[2]) if "." in name else None

    def const(self, value: Any) -> str:
        """A name for value in the generated code's namespace."""
        self.n += 1
        name = "_c%d" % self.n
        self.ns[name] = value
        return name

    def define(self, lines: List[str]) -> str:
        """A generated function (its body, over its argument v); returns its name."""
        self.n += 1
        name = "_f%d" % self.n
        exec("def %s(v):\n    %s\n" % (name, "\n    ".join(lines)), self.ns)  # noqa: S102 (our own text)
        return name

    def fn(self, node: _Node) -> str:
        """The node's check as a function (a scalar's made from its expression)."""
        if node.fn is not None:
            return node.fn
        assert node.bad is not None
        return self.define(["if %s:" % node.bad.format(x="v"),
                            "    raise _Fail(%s)" % self.const("must be " + node.what)])

    def test(self, node: _Node, x: str, segment: str, indent: str) -> List[str]:
        """Lines that check the value in variable x, a failure getting the
        path segment (an expression)."""
        if node.bad is not None:
            if node.bad == "False":
                return []
            return [indent + "if %s:" % node.bad.format(x=x),
                    indent + "    raise _Fail(%s).at(%s)" % (self.const("must be " + node.what), segment)]
        return [indent + "try:", indent + "    %s(%s)" % (node.fn, x),
                indent + "except _Fail as e:", indent + "    raise e.at(%s)" % segment]

    # -- one annotation ------------------------------------------------------------------------
    def of(self, t: Any, name: str) -> _Node:
        """The node of an annotation; name: "Type.field" for its bounds."""
        if t is Any:
            return _Node(None, "False", "anything", ())
        if t is type(None):
            return _Node(None, "{x} is not None", "null", (type(None),))
        if t is bool:
            return _Node(None, "type({x}) is not bool", "true or false", (bool,))
        if t is str:
            b = self.bound(name) or self.defaults.get(str, Bound())
            cond = "type({x}) is not str"
            if b.most is not None:
                cond += " or len({x}) > %d" % b.most
            if b.least:
                cond += " or len({x}) < %d" % b.least
            cond = "(%s)" % cond
            what = "a %sstring%s" % ("non-empty " if b.least else "",
                                     " of at most %d characters" % b.most if b.most is not None else "")
            return _Node(None, cond, what, (str,))
        if t is int:
            b = self.bound(name) or self.defaults.get(int, Bound())
            cond = "type({x}) is not int"
            if b.least is not None:
                cond += " or {x} < %d" % b.least
            if b.most is not None:
                cond += " or {x} > %d" % b.most
            what = "an integer" + ("" if b.least is None and b.most is None else " from %s to %s" % (
                _number(b.least) if b.least is not None else "any", _number(b.most) if b.most is not None else "any"))
            return _Node(None, "(%s)" % cond, what, (int,))
        if t is float:
            return _Node(None, "(type({x}) is not float and type({x}) is not int)", "a number", (int, float))
        if _is_typeddict(t):
            return self.sized(_Node(self.typeddict(t), None, "an object", (dict,)), name, "keys")
        origin, args = typing.get_origin(t), typing.get_args(t)
        if origin is typing.Literal:
            return self.literal(args)
        if origin is typing.Union:
            return self.union(args, name)
        if origin is list:
            return self.sized(self.array(self.of(args[0], name + "[]")), name, "items")
        if origin is tuple:
            return self.tuple([self.of(a, "%s[%d]" % (name, i)) for i, a in enumerate(args)])
        if origin is dict:
            if args[0] is not str:
                raise TypeError("JSON objects have string keys, not %r" % (args[0],))
            return self.mapping(self.of(args[1], name + "[]"), self.bound(name))
        raise TypeError("no checker for %r" % (t,))

    def mapping(self, value: _Node, b: Optional[Bound]) -> _Node:
        """Dict[str, X]: its size, its keys' lengths and its values, in one pass."""
        lines = ["if type(v) is not dict:", "    raise _Fail('must be an object')"]
        if b is not None and (b.least or b.most is not None):
            least, most = b.least or 0, b.most if b.most is not None else 1 << 62
            lines += ["if len(v) > %d:" % most,
                      "    raise _Fail(%s)" % self.const("must hold at most %s keys" % _number(most)),
                      "if len(v) < %d:" % least,
                      "    raise _Fail(%s)" % self.const("must hold at least %d keys" % least)]
        each = self.test(value, "x", "_value(k)", "    ")
        if b is not None and b.keys is not None:
            k_least, k_most = b.keys.least or 0, b.keys.most if b.keys.most is not None else 1 << 62
            each = ["    if not %d <= len(k) <= %d:" % (k_least, k_most),
                    "        raise _Fail('has a key of %%d characters (%d to %s)' %% len(k))"
                    % (k_least, _number(k_most))] + each
        if each:
            lines += ["for k, x in v.items():"] + each
        return _Node(self.define(lines), None, "an object", (dict,))

    def literal(self, values: Tuple[Any, ...]) -> _Node:
        words = ", ".join(str(a) for a in values)
        allowed = self.const(frozenset((type(a), a) for a in values))
        types = tuple({type(a) for a in values})
        if len(types) == 1 and types[0] in (str, int):
            cond = "(type({x}) is not %s or ({x}.__class__, {x}) not in %s)" % (types[0].__name__, allowed)
        else:  # hashable only when of one of the literals' types
            cond = "(type({x}) not in %s or (type({x}), {x}) not in %s)" % (self.const(frozenset(types)), allowed)
        return _Node(None, cond, "one of " + words, types)

    def sized(self, node: _Node, name: str, what: str) -> _Node:
        """node, after the bound of `name` on the value's length (and its keys')."""
        b = self.bound(name)
        if b is None or (not b.least and b.most is None and b.keys is None):
            return node
        least, most = b.least or 0, b.most if b.most is not None else 1 << 62
        lines = ["if type(v) is list or type(v) is dict:",
                 "    n = len(v)",
                 "    if n > %d:" % most,
                 "        raise _Fail(%s)" % self.const("must hold at most %s %s" % (_number(most), what)),
                 "    if n < %d:" % least,
                 "        raise _Fail(%s)" % self.const("must hold at least %d %s" % (least, what))]
        if b.keys is not None:
            k_least, k_most = b.keys.least or 0, b.keys.most if b.keys.most is not None else 1 << 62
            lines += ["if type(v) is dict:",
                      "    for k in v:",
                      "        if not %d <= len(k) <= %d:" % (k_least, k_most),
                      "            raise _Fail('has a key of %%d characters (%d to %s)' %% len(k))"
                      % (k_least, _number(k_most))]
        lines.append("%s(v)" % self.fn(node))
        return _Node(self.define(lines), None, node.what, node.types)

    def array(self, item: _Node) -> _Node:
        """A List[X]: each item of `item` (a TypedDict of scalars written
        into the loop)."""
        lines = ["if type(v) is not list:", "    raise _Fail('must be an array')"]
        if item.fn in self.flat:
            lines += ["for i, v in enumerate(v):",  # v: each item in turn (enumerate holds the list)
                      "    try:"] + ["        " + line for line in self.flat[item.fn]] + [
                      "    except _Fail as e:", "        raise e.at(_index(i))"]
        else:
            each = self.test(item, "x", "_index(i)", "    ")
            lines += ["for i, x in enumerate(v):"] + each if each else []
        return _Node(self.define(lines), None, "an array", (list,))

    def tuple(self, items: List[_Node]) -> _Node:
        n = len(items)
        lines = ["if type(v) is not list or len(v) != %d:" % n,
                 "    raise _Fail('must be an array of %d items')" % n]
        for i, node in enumerate(items):
            lines += ["x = v[%d]" % i] + self.test(node, "x", repr("[%d]" % i), "")
        return _Node(self.define(lines), None, "an array of %d items" % n, (list,))

    def union(self, args: Tuple[Any, ...], name: str) -> _Node:
        if any(a is Any for a in args):
            return _Node(None, "False", "anything", ())
        dicts = [a for a in args if _is_typeddict(a)]
        nodes = [self.of(a, name) for a in args if not (_is_typeddict(a) and len(dicts) > 1)]
        if len(dicts) > 1:
            nodes.append(self.sized(_Node(self.tagged(dicts), None, "an object", (dict,)), name, "keys"))
        what = " or ".join(n.what for n in nodes)
        types = tuple(t for n in nodes for t in n.types)
        if all(n.bad is not None for n in nodes):  # scalars: bad when bad for each
            return _Node(None, "(%s)" % " and ".join(n.bad for n in nodes if n.bad), what, types)
        by_type: Dict[type, Check] = {}
        for node in nodes:
            for t in node.types:
                by_type.setdefault(t, self.ns[self.fn(node)])
        table = self.const(by_type)
        fn = self.define(["c = %s.get(type(v))" % table, "if c is None:",
                          "    raise _Fail(%s)" % self.const("must be " + what), "c(v)"])
        return _Node(fn, None, what, types)

    def tagged(self, alternatives: List[Any]) -> str:
        """A union of TypedDicts: by a Literal key they all have, else by a
        required key only one has."""
        hints = [typing.get_type_hints(a) for a in alternatives]
        for key in hints[0]:
            if all(key in h and key in a.__required_keys__ and typing.get_origin(h[key]) is typing.Literal
                   for a, h in zip(alternatives, hints)):
                table: Dict[Tuple[type, Any], Check] = {}
                values: List[Any] = []
                for a, h in zip(alternatives, hints):
                    for lit in typing.get_args(h[key]):
                        table[(type(lit), lit)] = self.ns[self.typeddict(a)]
                        values.append(lit)
                k, words = self.const(key), self.const(", ".join(str(x) for x in values))
                return self.define([
                    "if type(v) is not dict:", "    raise _Fail('must be an object')",
                    "tag = v.get(%s, _M)" % k,
                    "if tag is _M:", "    raise _Fail('is required').at(_key(%s))" % k,
                    "try:", "    c = %s.get((type(tag), tag))" % self.const(table),
                    "except TypeError:", "    c = None",
                    "if c is None:", "    raise _Fail(_one_of(%s, tag)).at(_key(%s))" % (words, k),
                    "c(v)"])
        own = []
        for a in alternatives:
            others = set().union(*(b.__required_keys__ for b in alternatives if b is not a))
            unique = sorted(set(a.__required_keys__) - others)
            if not unique:
                raise TypeError("%s cannot be told apart from the other alternatives" % a.__name__)
            own.append((unique[0], self.typeddict(a)))
        lines = ["if type(v) is not dict:", "    raise _Fail('must be an object')"]
        for k, fn in own:
            lines += ["if %r in v:" % k, "    return %s(v)" % fn]
        lines.append("raise _Fail(%s)" % self.const("must be an object with one of the keys " +
                                                  ", ".join(k for k, _ in own)))
        return self.define(lines)

    # -- an object ---------------------------------------------------------------------------------
    def typeddict(self, t: Any) -> str:
        done = self.done.get(t)
        if done is not None:
            return done
        hints = typing.get_type_hints(t)
        # its name first (a type that contains itself calls it), its body after its fields compile
        self.n += 1
        name = "_f%d" % self.n
        self.done[t] = name
        self.ns[name] = lambda v: self.ns["_body_" + name](v)
        lines = ["if type(v) is not dict:", "    raise _Fail('must be an object')", "miss = None"]
        likes = []
        scalars = True
        for k, hint in hints.items():
            field = "%s.%s" % (t.__name__, k)
            node = self.of(hint, field)
            scalars = scalars and node.bad is not None
            test = self.test(node, "x", self.const(_key(k)), "    ")
            if k in t.__required_keys__:  # missing: said after the keys that are there
                lines += ["try:", "    x = v[%r]" % k, "except KeyError:", "    if miss is None:",
                          "        miss = %r" % k] + (["else:"] + test if test else [])
            elif test:
                lines += ["x = v.get(%r, _M)" % k, "if x is not _M:"] + test
            b = self.bound(field)
            if b is not None and b.like is not None:
                likes.append((k, b.like))
        for k, other in likes:
            lines += ["a, b = v.get(%r), v.get(%r)" % (k, other),
                      "if type(a) is list and type(b) is list and len(a) != len(b):",
                      "    raise _Fail('must have as many items as %%%%s (%%d, not %%d)' %% (len(b), len(a)), "
                      "%s).at(%s)" % (self.const(_key(other)), self.const(_key(k)))]
        lines += ["if miss is not None:", "    raise _Fail('is required').at(_key(miss))"]
        if self.closed:
            lines += ["for k in v:", "    if k not in %s:" % self.const(frozenset(hints)),
                      "        raise _Fail(%s).at(_key(k))" % self.const("is not a key of " + t.__name__)]
        if scalars:
            self.flat[name] = lines
        body = self.ns["_body_" + name] = self.ns[self.define(lines)]
        self.ns[name] = body  # the generated code calls it by this name: no trampoline once compiled
        return name


def checker(t: Any, bounds: Optional[Mapping[str, Bound]] = None, closed: bool = False,
            defaults: Optional[Mapping[Any, Bound]] = None) -> Callable[[Any], Any]:
    """check(document) -> the document, of annotation t (a TypedDict or a
    union of them); raises Invalid. bounds: see the module doc; closed:
    objects may hold no key beyond their TypedDict's; defaults: the bounds
    of strings and integers that have none of their own."""
    comp = _Compiler(bounds or {}, closed, defaults or {})
    c = comp.ns[comp.fn(comp.of(t, getattr(t, "__name__", "document")))]

    def check(doc: Any) -> Any:
        try:
            c(doc)
        except _Fail as e:
            raise Invalid(e.message()) from None
        return doc
    return check
