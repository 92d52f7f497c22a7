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
This module imports nothing of graphsignal.
"""
import re
import typing
from typing import Any, Callable, Dict, List, Mapping, NamedTuple, Optional, Tuple

__all__ = ["Invalid", "Bound", "checker"]

Check = Callable[[Any, str], None]


class Invalid(ValueError):
    """A document that is not of the type; the message names where."""


class Bound(NamedTuple):
    least: Optional[int] = None  # characters, items or keys; an integer's least value (None: unbounded)
    most: Optional[int] = None  # ... most; an integer's largest value (None: unbounded)
    keys: Optional["Bound"] = None  # an object's keys, their characters
    like: Optional[str] = None  # a sibling key: an array as long as that one



_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_MISSING = object()


def _key_path(path: str, key: str) -> str:
    if _IDENT.match(key):
        return path + "." + key if path else key
    return "%s[%r]" % (path, key[:40])


def _at(path: str) -> str:
    return path or "the document"


def _number(n: int) -> str:
    for bits in (64, 63):
        if n == (1 << bits) - 1:
            return "2^%d-1" % bits
    return str(n)


def _is_typeddict(t: Any) -> bool:
    return isinstance(t, type) and issubclass(t, dict) and hasattr(t, "__required_keys__")


def _kind(v: Any) -> str:
    """The JSON type of a decoded value."""
    t = type(v)
    if v is None:
        return "null"
    if t is bool:
        return "bool"
    if t is int:
        return "int"
    if t is float:
        return "float"
    if t is str:
        return "str"
    if t is list:
        return "list"
    if t is dict:
        return "dict"
    return t.__name__


class _Compiler:
    def __init__(self, bounds: Mapping[str, Bound], closed: bool, defaults: Mapping[Any, Bound]) -> None:
        self.bounds = bounds
        self.closed = closed
        self.defaults = defaults
        self.done: Dict[Any, Check] = {}

    def bound(self, name: str) -> Optional[Bound]:
        """The bound of "Type.field" (or "Type.field[]"), else of the field's name."""
        if name in self.bounds:
            return self.bounds[name]
        return self.bounds.get(name.partition(".")[2]) if "." in name else None

    # -- one annotation ------------------------------------------------------------------------
    def of(self, t: Any, name: str) -> Tuple[Check, str, Tuple[str, ...]]:
        """(check, what it wants in words, the JSON types it takes) of an
        annotation; name: "Type.field" for its bounds."""
        if t is Any:
            return (lambda v, path: None), "anything", ()
        if t is type(None):
            return self._exact(None, "null"), "null", ("null",)
        if t is bool:
            return self._exact(bool, "true or false"), "true or false", ("bool",)
        if t is str:
            return self._str(self.bound(name) or self.defaults.get(str, Bound())), "a string", ("str",)
        if t is int:
            return self._int(self.bound(name) or self.defaults.get(int, Bound())), "an integer", ("int",)
        if t is float:
            return self._float(), "a number", ("int", "float")
        if _is_typeddict(t):
            return self._sized(self.typeddict(t), name, "keys"), "an object", ("dict",)
        origin, args = typing.get_origin(t), typing.get_args(t)
        if origin is typing.Literal:
            return self._literal(args), "one of " + ", ".join(str(a) for a in args), \
                tuple(sorted({_kind(a) for a in args}))
        if origin is typing.Union:
            return self._union(args, name)
        if origin is list:
            item = self.of(args[0], name + "[]")[0]
            return self._sized(self._items(list, item), name, "items"), "an array", ("list",)
        if origin is tuple:
            items = [self.of(a, "%s[%d]" % (name, i))[0] for i, a in enumerate(args)]
            return self._tuple(items), "an array of %d items" % len(items), ("list",)
        if origin is dict:
            if args[0] is not str:
                raise TypeError("JSON objects have string keys, not %r" % (args[0],))
            value = self.of(args[1], name + "[]")[0]
            return self._sized(self._items(dict, value), name, "keys"), "an object", ("dict",)
        raise TypeError("no checker for %r" % (t,))

    @staticmethod
    def _exact(t: Any, what: str) -> Check:
        def check(v: Any, path: str) -> None:
            if (v is not None) if t is None else (type(v) is not t):
                raise Invalid("%s must be %s" % (_at(path), what))
        return check

    @staticmethod
    def _str(b: Bound) -> Check:
        least, most = b.least or 0, b.most if b.most is not None else float("inf")
        what = "a %sstring%s" % ("non-empty " if least else "",
                                 " of at most %d characters" % most if b.most is not None else "")

        def check(v: Any, path: str) -> None:
            if type(v) is not str or not least <= len(v) <= most:
                raise Invalid("%s must be %s" % (_at(path), what))
        return check

    @staticmethod
    def _int(b: Bound) -> Check:
        least = b.least if b.least is not None else -float("inf")
        most = b.most if b.most is not None else float("inf")
        what = "an integer" + ("" if b.least is None and b.most is None else " from %s to %s" % (
            _number(b.least) if b.least is not None else "any", _number(b.most) if b.most is not None else "any"))

        def check(v: Any, path: str) -> None:
            if type(v) is not int or not least <= v <= most:
                raise Invalid("%s must be %s" % (_at(path), what))
        return check

    @staticmethod
    def _float() -> Check:
        def check(v: Any, path: str) -> None:
            if type(v) is not float and type(v) is not int:
                raise Invalid("%s must be a number" % _at(path))
        return check

    @staticmethod
    def _literal(values: Tuple[Any, ...]) -> Check:
        allowed = {(type(a), a) for a in values}
        words = ", ".join(str(a) for a in values)

        def check(v: Any, path: str) -> None:
            try:
                ok = (type(v), v) in allowed
            except TypeError:  # an array or object: unhashable
                ok = False
            if not ok:
                raise Invalid("%s must be one of %s, got %s" % (_at(path), words, _shown(v)))
        return check

    def _sized(self, inner: Check, name: str, what: str) -> Check:
        """inner, after the bound of `name` on the value's length (and its keys')."""
        b = self.bound(name)
        if b is None or (not b.least and b.most is None and b.keys is None):
            return inner
        least, most = b.least or 0, b.most if b.most is not None else float("inf")
        keys = b.keys

        def check(v: Any, path: str) -> None:
            if type(v) in (list, dict) and not least <= len(v) <= most:
                raise Invalid("%s must hold at most %s %s" % (_at(path), _number(int(most)), what) if len(v) > most
                              else "%s must hold at least %d %s" % (_at(path), least, what))
            if keys is not None and type(v) is dict:
                k_least, k_most = keys.least or 0, keys.most if keys.most is not None else float("inf")
                for k in v:
                    if not k_least <= len(k) <= k_most:
                        raise Invalid("%s has a key of %d characters (%d to %s)" % (
                            _at(path), len(k), k_least, _number(int(k_most))))
            inner(v, path)
        return check

    @staticmethod
    def _items(container: type, item: Check) -> Check:
        """An array (list) whose items, or an object (dict) whose values,
        are each of `item`."""
        what = "an array" if container is list else "an object"

        def check(v: Any, path: str) -> None:
            if type(v) is not container:
                raise Invalid("%s must be %s" % (_at(path), what))
            got: Any = v
            if container is list:
                for i, x in enumerate(got):
                    item(x, "%s[%d]" % (path, i))
            else:
                for k, x in got.items():
                    item(x, "%s[%r]" % (path, k[:40]))
        return check

    @staticmethod
    def _tuple(items: List[Check]) -> Check:
        n = len(items)

        def check(v: Any, path: str) -> None:
            if type(v) is not list or len(v) != n:
                raise Invalid("%s must be an array of %d items" % (_at(path), n))
            for i, (c, x) in enumerate(zip(items, v)):
                c(x, "%s[%d]" % (path, i))
        return check

    def _union(self, args: Tuple[Any, ...], name: str) -> Tuple[Check, str, Tuple[str, ...]]:
        dicts = [a for a in args if _is_typeddict(a)]
        by_kind: Dict[str, Check] = {}
        words: List[str] = []
        for a in args:
            if _is_typeddict(a) and len(dicts) > 1:
                continue
            c, what, kinds = self.of(a, name)
            words.append(what)
            for k in kinds:
                by_kind.setdefault(k, c)
        if len(dicts) > 1:
            by_kind["dict"] = self._sized(self._tagged(dicts), name, "keys")
            words.append("an object")
        if any(a is Any for a in args):
            return (lambda v, path: None), "anything", ()
        what = " or ".join(words)

        def check(v: Any, path: str) -> None:
            c = by_kind.get(_kind(v))
            if c is None:
                raise Invalid("%s must be %s" % (_at(path), what))
            c(v, path)
        return check, what, tuple(by_kind)

    def _tagged(self, alternatives: List[Any]) -> Check:
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
                        table[(type(lit), lit)] = self.typeddict(a)
                        values.append(lit)
                return self._by_tag(key, table, values)
        own = []
        for a in alternatives:
            others = set().union(*(b.__required_keys__ for b in alternatives if b is not a))
            unique = sorted(set(a.__required_keys__) - others)
            if not unique:
                raise TypeError("%s cannot be told apart from the other alternatives" % a.__name__)
            own.append((unique[0], self.typeddict(a)))
        wanted = ", ".join(k for k, _ in own)

        def check(v: Any, path: str) -> None:
            if type(v) is not dict:
                raise Invalid("%s must be an object" % _at(path))
            for k, c in own:
                if k in v:
                    c(v, path)
                    return
            raise Invalid("%s must be an object with one of the keys %s" % (_at(path), wanted))
        return check

    @staticmethod
    def _by_tag(key: str, table: Dict[Tuple[type, Any], Check], values: List[Any]) -> Check:
        words = ", ".join(str(x) for x in values)

        def check(v: Any, path: str) -> None:
            if type(v) is not dict:
                raise Invalid("%s must be an object" % _at(path))
            tag = v.get(key, _MISSING)
            if tag is _MISSING:
                raise Invalid("%s is required" % _key_path(path, key))
            try:
                c = table.get((type(tag), tag))
            except TypeError:  # unhashable
                c = None
            if c is None:
                raise Invalid("%s must be one of %s, got %s" % (_key_path(path, key), words, _shown(tag)))
            c(v, path)
        return check

    # -- an object ---------------------------------------------------------------------------------
    def typeddict(self, t: Any) -> Check:
        done = self.done.get(t)
        if done is not None:
            return done
        fields: List[Tuple[str, Check]] = []
        likes: List[Tuple[str, str]] = []
        required = [k for k in typing.get_type_hints(t) if k in t.__required_keys__]
        known = frozenset(typing.get_type_hints(t))
        closed = self.closed

        def check(v: Any, path: str) -> None:
            if type(v) is not dict:
                raise Invalid("%s must be an object" % _at(path))
            for k, c in fields:
                x = v.get(k, _MISSING)
                if x is not _MISSING:
                    c(x, _key_path(path, k))
            for k, other in likes:
                a, b = v.get(k), v.get(other)
                if type(a) is list and type(b) is list and len(a) != len(b):
                    raise Invalid("%s must have as many items as %s (%d, not %d)" % (
                        _key_path(path, k), _key_path(path, other), len(b), len(a)))
            if len(v) < len(required) + 8:  # the common case: every key known, cheap to confirm
                for k in required:
                    if k not in v:
                        raise Invalid("%s is required" % _key_path(path, k))
            else:
                missing = [k for k in required if k not in v]
                if missing:
                    raise Invalid("%s is required" % _key_path(path, missing[0]))
            if closed:
                for k in v:
                    if k not in known:
                        raise Invalid("%s is not a key of %s" % (_key_path(path, k), t.__name__))

        self.done[t] = check  # before its fields: a type that contains itself
        for k, hint in typing.get_type_hints(t).items():
            name = "%s.%s" % (t.__name__, k)
            fields.append((k, self.of(hint, name)[0]))
            b = self.bound(name)
            if b is not None and b.like is not None:
                likes.append((k, b.like))
        return check


def _shown(v: Any) -> str:
    text = repr(v) if not isinstance(v, (list, dict)) else ("an array" if isinstance(v, list) else "an object")
    return text[:60]


def checker(t: Any, bounds: Optional[Mapping[str, Bound]] = None, closed: bool = False,
            defaults: Optional[Mapping[Any, Bound]] = None) -> Callable[[Any], Any]:
    """check(document) -> the document, of annotation t (a TypedDict or a
    union of them); raises Invalid. bounds: see the module doc; closed:
    objects may hold no key beyond their TypedDict's; defaults: the bounds
    of strings and integers that have none of their own."""
    c = _Compiler(bounds or {}, closed, defaults or {}).of(t, getattr(t, "__name__", "document"))[0]

    def check(doc: Any) -> Any:
        c(doc, "")
        return doc
    return check
