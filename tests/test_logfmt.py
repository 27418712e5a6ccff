"""``nvrx_seghealth._logfmt``: the events' ``key=value`` fields read back exactly."""

from __future__ import annotations

from nvrx_seghealth._logfmt import FieldValue, format_fields, parse_fields


def test_fields_read_back_exactly():
    fields: dict[str, FieldValue] = {
        "path": "/shared/a b/segment_health_check.1.2",
        "detail": 'say "x=1"',
        "empty": "",
        "n": 12,
        "ok": True,
        "no": False,
        "gone": None,
        "name": "née",
    }
    message = format_fields(fields)
    assert message.startswith('path="/shared/a b/segment_health_check.1.2" ')
    assert "n=12 ok=true no=false" in message and "gone" not in message
    assert parse_fields(message) == {
        "path": "/shared/a b/segment_health_check.1.2",
        "detail": 'say "x=1"',
        "empty": "",
        "n": "12",
        "ok": "true",
        "no": "false",
        "name": "née",
    }
