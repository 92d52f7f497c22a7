"""Itanium C++ demangling for kernel symbols.

`demangle_all(symbols)` asks binutils' c++filt once for every symbol it
has not seen (one process per batch, not per symbol) and caches the
answers; without c++filt (slim containers often lack binutils) a small
pure-Python demangler covers the subset that CUDA kernel symbols use:
nested and local names, templates and their arguments, substitutions,
lambdas, literals, qualifiers and function types. Anything outside that
subset comes back unchanged rather than wrong.
"""
import shutil
import subprocess
import threading

_BUILTIN = {
    "v": "void", "w": "wchar_t", "b": "bool", "c": "char", "a": "signed char", "h": "unsigned char",
    "s": "short", "t": "unsigned short", "i": "int", "j": "unsigned int", "l": "long",
    "m": "unsigned long", "x": "long long", "y": "unsigned long long", "n": "__int128",
    "o": "unsigned __int128", "f": "float", "d": "double", "e": "long double", "g": "__float128",
    "z": "...",
}
_BUILTIN_D = {"Dh": "half", "Df": "decimal32", "Dd": "decimal64", "De": "decimal128", "Ds": "char16_t",
              "Di": "char32_t", "Du": "char8_t", "Dn": "decltype(nullptr)", "Da": "auto",
              "Dc": "decltype(auto)"}
# literal suffixes as c++filt prints them
_LIT_SUFFIX = {"i": "", "j": "u", "l": "l", "m": "ul", "x": "ll", "y": "ull"}
_CHAR_TRAITS = "<char, std::char_traits<char> >"
# spelled out in full, as c++filt prints them
_STD_SUBST = {"St": "std", "Sa": "std::allocator", "Sb": "std::basic_string",
              "Ss": "std::basic_string<char, std::char_traits<char>, std::allocator<char> >",
              "Si": "std::basic_istream" + _CHAR_TRAITS, "So": "std::basic_ostream" + _CHAR_TRAITS,
              "Sd": "std::basic_iostream" + _CHAR_TRAITS}
_OPERATORS = {
    "nw": "new", "na": "new[]", "dl": "delete", "da": "delete[]", "ps": "+", "ng": "-", "ad": "&",
    "de": "*", "co": "~", "pl": "+", "mi": "-", "ml": "*", "dv": "/", "rm": "%", "an": "&", "or": "|",
    "eo": "^", "aS": "=", "pL": "+=", "mI": "-=", "mL": "*=", "dV": "/=", "rM": "%=", "aN": "&=",
    "oR": "|=", "eO": "^=", "ls": "<<", "rs": ">>", "lS": "<<=", "rS": ">>=", "eq": "==", "ne": "!=",
    "lt": "<", "gt": ">", "le": "<=", "ge": ">=", "ss": "<=>", "nt": "!", "aa": "&&", "oo": "||",
    "pp": "++", "mm": "--", "cm": ",", "pm": "->*", "pt": "->", "cl": "()", "ix": "[]", "qu": "?",
}


class _Fail(Exception):
    pass


# -- nodes: plain tuples keep the parser small -----------------------------------
# ("name", text)                      an identifier or ready-made text
# ("qual", [parts])                   a::b::c
# ("tmpl", node, [args])              node<args>
# ("ptr"|"ref"|"rref", node)
# ("cv", node, " const"...)
# ("func", ret, [params], suffix)     a function type
# ("enc", name, ret, [params], suffix) a function encoding
# ("local", enc, entity)               enc::entity


class _Parser:
    def __init__(self, s):
        self.s = s
        self.i = 0
        self.subs = []
        self.targs = None  # the template arguments T_ refers to

    # -- primitives --------------------------------------------------------------
    def peek(self, n=1):
        return self.s[self.i:self.i + n]

    def eat(self, lit):
        if self.s.startswith(lit, self.i):
            self.i += len(lit)
            return True
        return False

    def need(self, lit):
        if not self.eat(lit):
            raise _Fail("expected %r at %d" % (lit, self.i))

    def number(self):
        j = self.i
        neg = self.eat("n")
        k = self.i
        while self.i < len(self.s) and self.s[self.i].isdigit():
            self.i += 1
        if k == self.i:
            self.i = j
            raise _Fail("number expected at %d" % j)
        v = int(self.s[k:self.i])
        return -v if neg else v

    def seq_id(self):
        # base 36, digits then upper-case letters; "S_" is 0, "S0_" is 1
        if self.eat("_"):
            return 0
        v = 0
        while True:
            c = self.peek()
            if c.isdigit():
                v = v * 36 + int(c)
            elif "A" <= c <= "Z":
                v = v * 36 + ord(c) - 55
            elif c == "_":
                self.i += 1
                return v + 1
            else:
                raise _Fail("bad seq-id at %d" % self.i)
            self.i += 1

    # -- grammar -----------------------------------------------------------------
    def mangled(self):
        self.need("_Z")
        node = self.encoding()
        if self.i < len(self.s) and self.s[self.i] == ".":
            node = ("suffix", node, " [clone %s]" % self.s[self.i:])
            self.i = len(self.s)
        return node

    def encoding(self):
        saved = self.targs
        name, is_tmpl, targs, suffix = self.name()
        if self.i >= len(self.s) or self.peek() in ("E", "."):
            self.targs = saved
            return name
        if targs is not None:
            self.targs = targs
        ret = None
        if is_tmpl:
            ret = self.type()
        params = self.bare_function_type()
        self.targs = saved
        return ("enc", name, ret, params, suffix)

    def bare_function_type(self):
        params = []
        while self.i < len(self.s) and self.peek() not in ("E", "."):
            params.append(self.type())
        if len(params) == 1 and params[0] == ("name", "void"):
            params = []
        return params

    def name(self):
        """(node, is a template function (its return type is encoded), its
        template args, cv/ref suffix)"""
        c = self.peek()
        if c == "N":
            return self.nested_name()
        if c == "Z":
            return self.local_name()
        if self.peek(2) == "St":
            self.i += 2
            node = ("qual", [("name", "std"), self.unqualified_name()])
            if self.peek() == "I":
                self.subs.append(node)
        elif c == "S":
            node = self.substitution()  # already a candidate: not added again
            if self.peek() != "I":
                raise _Fail("substitution as a name needs template args")
        else:
            node = self.unqualified_name()
            if self.peek() == "I":
                self.subs.append(node)
        if self.peek() == "I":
            args = self.template_args()
            return ("tmpl", node, args), node[0] != "ctor", args, ""
        return node, False, None, ""

    def nested_name(self):
        self.need("N")
        suffix = ""
        quals = ""
        while self.peek() in ("r", "V", "K"):
            quals += {"r": " restrict", "V": " volatile", "K": " const"}[self.peek()]
            self.i += 1
        if self.peek() in ("R", "O"):
            suffix = " &" if self.peek() == "R" else " &&"
            self.i += 1
        node = None
        is_tmpl, targs = False, None
        last_name = None  # the class a constructor or destructor is named after
        special = False  # ctor, dtor or conversion: no return type even as a template
        while True:
            c = self.peek()
            if c == "E":
                self.i += 1
                break
            if not c:
                raise _Fail("unterminated nested name")
            from_subst = False
            if c == "I":
                if node is None:
                    raise _Fail("template args without a name")
                targs = self.template_args()
                node = ("tmpl", node, targs)
                is_tmpl = not special
            else:
                is_tmpl = False
                if c == "S":
                    part = self.substitution()
                    from_subst = True
                    special = False
                    last_name = part
                elif c == "T":
                    part = self.template_param()
                    special = False
                    last_name = part
                else:
                    part = self.unqualified_name(last_name)
                    special = part[0] == "ctor" or (part[0] == "name" and part[1].startswith("operator "))
                    if part[0] == "ctor":
                        part = ("name", part[1])
                    else:
                        last_name = part
                node = part if node is None else _join(node, part)
            if not from_subst and self.peek() != "E":
                self.subs.append(node)
        if node is None:
            raise _Fail("empty nested name")
        # a constructor template has no return type, but T_ still names its args
        return node, is_tmpl, targs if node[0] == "tmpl" else None, quals + suffix

    def local_name(self):
        self.need("Z")
        enc = self.encoding()
        self.need("E")
        if self.eat("s"):
            self.discriminator()
            return ("local", enc, ("name", "string literal")), False, None, ""
        if self.eat("d"):
            if self.peek() != "_":
                self.number()
            self.need("_")
        # the entity's parameters (if it is a function) belong to the
        # encoding this local name is the name of
        ent, is_tmpl, targs, suffix = self.name()
        self.discriminator()
        return ("local", enc, ent), is_tmpl, targs, suffix

    def discriminator(self):
        if self.peek(2) == "__":
            self.i += 2
            self.number()
            self.need("_")
        elif self.peek() == "_" and self.peek(2)[1:].isdigit():
            self.i += 2

    def unqualified_name(self, last=None):
        c = self.peek()
        if c.isdigit():
            node = self.source_name()
        elif self.peek(2) == "Ut":
            self.i += 2
            n = 1 if self.peek() == "_" else self.number() + 2
            self.need("_")
            node = ("name", "{unnamed type#%d}" % n)
        elif self.peek(2) == "Ul":
            self.i += 2
            params = []
            while self.peek() != "E":
                params.append(self.type())
            self.need("E")
            n = 1 if self.peek() == "_" else self.number() + 2
            self.need("_")
            if params == [("name", "void")]:
                params = []
            node = ("lambda", params, n)
        elif (c in ("C", "D") and self.peek(2)[1:2].isdigit()) or self.peek(2) == "CI":
            inheriting = self.peek(2) == "CI"
            self.i += 3 if inheriting else 2
            if inheriting:
                self.type()  # the base class whose constructor is inherited
            base = _last_identifier(last)
            node = ("ctor", ("~" if c == "D" else "") + base)
        elif self.peek(2) == "cv":
            self.i += 2
            node = ("name", "operator " + _str(self.type()))
        elif self.peek(2) in _OPERATORS:
            op = _OPERATORS[self.peek(2)]
            self.i += 2
            node = ("name", "operator" + (" " if op[0].isalpha() else "") + op)
        elif c == "L":  # internal linkage marker before a source name
            self.i += 1
            node = self.source_name()
        else:
            raise _Fail("unqualified name at %d" % self.i)
        while self.eat("B"):  # ABI tags
            tag = self.source_name()
            node = ("name", _str(node) + "[abi:%s]" % tag[1])
        return node

    def source_name(self):
        n = self.number()
        text = self.s[self.i:self.i + n]
        if len(text) != n:
            raise _Fail("short source name")
        self.i += n
        if text.startswith("_GLOBAL__N"):
            text = "(anonymous namespace)"
        return ("name", text)

    def substitution(self):
        two = self.peek(2)
        if two in _STD_SUBST:
            self.i += 2
            return ("name", _STD_SUBST[two])
        self.need("S")
        k = self.seq_id()
        if k >= len(self.subs):
            raise _Fail("substitution %d of %d" % (k, len(self.subs)))
        return self.subs[k]

    def template_param(self):
        self.need("T")
        k = self.seq_id()
        if self.targs is None or k >= len(self.targs):
            return ("name", "T%d" % k if k else "T")
        return self.targs[k]

    def template_args(self):
        self.need("I")
        args = []
        while not self.eat("E"):
            if not self.peek():
                raise _Fail("unterminated template args")
            args.append(self.template_arg())
        return args

    def template_arg(self):
        c = self.peek()
        if c == "L":
            return self.expr_primary()
        if c == "X":
            self.i += 1
            e = self.expression()
            self.need("E")
            return e
        if c == "J":
            self.i += 1
            pack = []
            while not self.eat("E"):
                pack.append(self.template_arg())
            return ("pack", pack)
        return self.type()

    def expr_primary(self):
        self.need("L")
        if self.eat("_Z"):
            enc = self.encoding()
            self.need("E")
            return enc
        if self.peek() == "Z":
            raise _Fail("unsupported literal")
        t = self.peek()
        if t in _BUILTIN and t not in ("v", "z"):
            self.i += 1
            neg = self.eat("n")
            j = self.i
            while self.peek().isdigit():
                self.i += 1
            digits = self.s[j:self.i]
            self.need("E")
            if t == "b":
                return ("name", "true" if digits == "1" else "false")
            if t in _LIT_SUFFIX:
                return ("name", ("-" if neg else "") + digits + _LIT_SUFFIX[t])
            return ("name", "(%s)%s%s" % (_BUILTIN[t], "-" if neg else "", digits))
        typ = self.type()
        neg = self.eat("n")
        j = self.i
        while self.peek() and self.peek() in "0123456789abcdef":
            self.i += 1
        digits = self.s[j:self.i]
        self.need("E")
        return ("name", "(%s)%s%s" % (_str(typ), "-" if neg else "", digits))

    def expression(self):
        c = self.peek()
        if c == "L":
            return self.expr_primary()
        if c == "T":
            return self.template_param()
        if self.peek(2) == "ad":
            self.i += 2
            operand = self.expression()
            if operand[0] == "enc" and operand[1][0] == "qual":
                # c++filt (libiberty) leaves out the signature of a qualified,
                # non-template function whose address is taken: &ns::f
                return ("name", "&" + _str(operand[1]))
            return ("name", "&(" + _str(operand) + ")")
        if self.peek(2) == "fp":
            self.i += 2
            while self.peek() in ("r", "V", "K"):
                self.i += 1
            n = 1 if self.peek() == "_" else self.number() + 2
            self.need("_")
            return ("name", "{parm#%d}" % n)
        raise _Fail("unsupported expression at %d" % self.i)

    def type(self):
        c = self.peek()
        if c in _BUILTIN:
            self.i += 1
            return ("name", _BUILTIN[c])
        two = self.peek(2)
        if two in _BUILTIN_D:
            self.i += 2
            return ("name", _BUILTIN_D[two])
        if two == "DF":  # _FloatN
            self.i += 2
            n = self.number()
            self.need("_")
            return ("name", "_Float%d" % n)
        if c == "u":
            self.i += 1
            return self.source_name()
        if c in ("P", "R", "O"):
            self.i += 1
            node = ({"P": "ptr", "R": "ref", "O": "rref"}[c], self.type())
            self.subs.append(node)
            return node
        if c in ("r", "V", "K"):
            q = ""
            while self.peek() in ("r", "V", "K"):
                q = {"r": " restrict", "V": " volatile", "K": " const"}[self.peek()] + q
                self.i += 1
            node = ("cv", self.type(), q)
            self.subs.append(node)
            return node
        if c == "F":
            self.i += 1
            self.eat("Y")
            ret = self.type()
            params = []
            ref = ""
            while True:
                if self.eat("RE") or self.eat("OE"):  # ref-qualifier, then the end
                    ref = " &" if self.s[self.i - 2] == "R" else " &&"
                    break
                if self.eat("E"):
                    break
                params.append(self.type())
            if params == [("name", "void")]:
                params = []
            node = ("func", ret, params, ref)
            self.subs.append(node)
            return node
        if c == "A":
            self.i += 1
            dim = ""
            if self.peek().isdigit():
                dim = str(self.number())
            elif self.peek() != "_":
                dim = _str(self.expression())
            self.need("_")
            node = ("array", self.type(), dim)
            self.subs.append(node)
            return node
        if c == "M":
            self.i += 1
            cls = self.type()
            mem = self.type()
            if mem[0] == "func":
                node = ("name", "%s (%s::*)(%s)%s" % (_str(mem[1]), _str(cls), ", ".join(_str(p) for p in mem[2]),
                                                     mem[3]))
            else:
                node = ("name", "%s %s::*" % (_str(mem), _str(cls)))
            self.subs.append(node)
            return node
        if c == "T":
            node = self.template_param()
            self.subs.append(node)
            if self.peek() == "I":
                node = ("tmpl", node, self.template_args())
                self.subs.append(node)
            return node
        if two == "Dp":
            self.i += 2
            node = ("pack_exp", self.type())
            self.subs.append(node)
            return node
        if c == "S" and two != "St":
            node = self.substitution()
            if self.peek() == "I":
                node = ("tmpl", node, self.template_args())
                self.subs.append(node)
            return node
        if c in ("N", "Z") or c.isdigit() or two in ("St", "Ut", "Ul"):
            node, _, _, _ = self.name()
            self.subs.append(node)
            return node
        raise _Fail("type at %d (%r)" % (self.i, c))


def _join(a, b):
    parts = list(a[1]) if a[0] == "qual" else [a]
    return ("qual", parts + [b])


def _last_identifier(node):
    while node is not None:
        if node[0] == "name":
            return node[1].split("<", 1)[0].rsplit("::", 1)[-1].split("[abi:", 1)[0]
        if node[0] == "tmpl":
            node = node[1]
        elif node[0] == "qual":
            node = node[1][-1]
        else:
            break
    raise _Fail("constructor without a class name")


def _list(nodes):
    # an empty pack (`JE`, or its expansion `Dp`) prints as nothing, commas included
    return ", ".join(x for x in (_str(n) for n in nodes) if x)


def _targs(args):
    s = _list(args)
    return "<" + s + (" >" if s.endswith(">") else ">")


def _str(n):
    k = n[0]
    if k == "name":
        return n[1]
    if k == "qual":
        return "::".join(_str(p) for p in n[1])
    if k == "tmpl":
        base = _str(n[1])
        return base + (" " if base.endswith("<") else "") + _targs(n[2])
    if k == "lambda":
        return "{lambda(%s)#%d}" % (", ".join(_str(p) for p in n[1]), n[2])
    if k == "ctor":
        return n[1]
    if k in ("ptr", "ref", "rref"):
        mark = {"ptr": "*", "ref": "&", "rref": "&&"}[k]
        inner = n[1]
        if inner[0] == "func":
            return "%s (%s)(%s)%s" % (_str(inner[1]), mark, ", ".join(_str(p) for p in inner[2]), inner[3])
        if inner[0] == "array":
            return "%s (%s) [%s]" % (_str(inner[1]), mark, inner[2])
        return _str(inner) + mark
    if k == "cv":
        return _str(n[1]) + n[2]
    if k == "func":
        return "%s (%s)%s" % (_str(n[1]), ", ".join(_str(p) for p in n[2]), n[3])
    if k == "array":
        return "%s [%s]" % (_str(n[1]), n[2])
    if k == "pack":
        return _list(n[1])
    if k == "pack_exp":
        # an expanded pack reads as its elements, as c++filt prints it
        return _str(n[1]) if n[1][0] == "pack" else _str(n[1]) + "..."
    if k == "enc":
        _, name, ret, params, suffix = n
        s = "%s(%s)%s" % (_str(name), _list(params), suffix)
        return (_str(ret) + " " + s) if ret is not None else s
    if k == "local":
        enc = n[1]
        if enc[0] == "enc" and enc[2] is not None:  # c++filt leaves out the enclosing function's return type
            enc = ("enc", enc[1], None, enc[3], enc[4])
        return _str(enc) + "::" + _str(n[2])
    if k == "suffix":
        return _str(n[1]) + n[2]
    raise _Fail("node %r" % (k,))


def demangle_py(symbol):
    """The pure-Python demangler: the readable name, or `symbol` itself
    when it is not mangled or uses grammar outside the subset."""
    if not symbol.startswith("_Z"):
        return symbol
    try:
        p = _Parser(symbol)
        node = p.mangled()
        if p.i != len(symbol):
            return symbol
        return _str(node)
    except (_Fail, IndexError, ValueError, RecursionError):
        return symbol


class Demangler:
    """Cached demangling; c++filt when present (one process per batch of
    new symbols), else demangle_py."""

    def __init__(self, cxxfilt="auto", timeout=5.0):
        self.path = shutil.which("c++filt") if cxxfilt == "auto" else cxxfilt
        self.timeout = timeout
        self.cache = {}
        self.lock = threading.Lock()

    def demangle_all(self, symbols):
        with self.lock:
            new = [s for s in dict.fromkeys(symbols) if s not in self.cache]
        if new:
            mangled = [s for s in new if s.startswith("_Z")]
            out = dict(zip(mangled, self._cxxfilt(mangled))) if mangled and self.path else {}
            with self.lock:
                for s in new:
                    d = out.get(s)
                    self.cache[s] = d if d else demangle_py(s)
        with self.lock:
            return [self.cache[s] for s in symbols]

    def demangle(self, symbol):
        return self.demangle_all([symbol])[0]

    def _cxxfilt(self, symbols):
        out = []
        # chunks keep each command line well under the kernel's argv limit
        chunk, size = [], 0
        for s in symbols:
            if chunk and size + len(s) > 100_000:
                out.extend(self._run(chunk))
                chunk, size = [], 0
            chunk.append(s)
            size += len(s) + 1
        if chunk:
            out.extend(self._run(chunk))
        return out

    def _run(self, chunk):
        try:
            r = subprocess.run([self.path] + chunk, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                               timeout=self.timeout, check=False)
            lines = r.stdout.decode("utf-8", "replace").split("\n")
        except (OSError, subprocess.SubprocessError):
            self.path = None  # broken c++filt: use the Python subset from now on
            return [None] * len(chunk)
        if r.returncode != 0 or len(lines) < len(chunk):
            return [None] * len(chunk)
        # c++filt echoes what it cannot demangle; that is our answer too
        return [ln if ln and ln != s else None for ln, s in zip(lines, chunk)]
