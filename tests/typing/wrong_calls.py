"""Calls mypy must refuse (tests/unit/test_typing.py expects each error line)."""

from __future__ import annotations

from tests.typing.typed_example import send_invoice, total

send_invoice.submit("seven", "a@b.c")  # error: order_id is an int
send_invoice.submit(7)  # error: email is missing
send_invoice.submit(7, "a@b.c", colour="red")  # error: no such parameter
wrong: str = send_invoice.submit(7, "a@b.c").result()  # error: the result is a dict
also_wrong: str = total.submit([1.0]).result()  # error: the result is a float
