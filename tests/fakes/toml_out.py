"""Just enough TOML writing for test configs: tables of scalars / lists / inline tables, and [[pools]]."""

from __future__ import annotations

import json


def _value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, list):
        return "[" + ", ".join(_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{json.dumps(k) if not k.replace('_', '').replace('-', '').isalnum() else k} = "
                               f"{_value(x)}" for k, x in v.items()) + "}"
    return json.dumps(str(v))


def dumps(data: dict) -> str:
    out = []
    for key, value in data.items():
        if isinstance(value, list) and value and all(isinstance(x, dict) for x in value):
            for item in value:
                out.append(f"[[{key}]]")
                out.extend(f"{k} = {_value(v)}" for k, v in item.items())
        elif isinstance(value, dict):
            out.append(f"[{key}]")
            out.extend(f"{k} = {_value(v)}" for k, v in value.items())
        else:
            out.insert(0, f"{key} = {_value(value)}")
    return "\n".join(out) + "\n"
