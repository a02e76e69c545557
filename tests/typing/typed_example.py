"""A typed module mypy checks (scripts/check, and tests/unit/test_typing.py): the
calls here are right; `wrong_calls.py` holds the ones mypy must refuse."""

from __future__ import annotations

from typing import Any

from tasklab import TaskApp, TaskHandle

app = TaskApp("sqlite:///:memory:")


@app.task(name="shop.send_invoice")
def send_invoice(ctx: Any, order_id: int, email: str) -> dict[str, int]:
    return {"order_id": order_id}


@app.task(name="shop.total")
async def total(ctx: Any, prices: list[float]) -> float:
    return sum(prices)


def use() -> None:
    handle: TaskHandle[dict[str, int]] = send_invoice.submit(7, "a@b.c")
    invoice: dict[str, int] = handle.result(timeout=5)
    print(invoice["order_id"])
    send_invoice.options(queue="mail", delay=60).submit(order_id=8, email="b@c.d")
    send_invoice.submit_many([send_invoice.call(1, "x@y.z"), send_invoice.call(2, "y@z.a")])
    amount: float = total.submit([1.5, 2.5]).result()
    print(amount)
