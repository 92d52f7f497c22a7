"""Validation of /signals documents against the JSON Schema the package
ships (graphsignal/schema/signals.schema.json)."""
import jsonschema

from graphsignal import signals_schema

_validator = None


def validator():
    global _validator
    if _validator is None:
        schema = signals_schema.load()
        jsonschema.Draft202012Validator.check_schema(schema)
        _validator = jsonschema.Draft202012Validator(schema)
    return _validator


def errors(doc):
    """Every way doc breaks the schema, one line each (empty: valid)."""
    return sorted("%s: %s" % ("/".join(str(p) for p in e.absolute_path) or "(top)", e.message)
                  for e in validator().iter_errors(doc))


def assert_valid(doc):
    found = errors(doc)
    assert not found, "\n".join(found[:20])
