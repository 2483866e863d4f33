"""`PlanfenceStore`: LangGraph's store API over the shared memory, with tracked reads."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from planfence.adapters.langgraph import ImmutableRecordError, PlanfenceStore
from planfence.shared_memory import NotOwnerError, create_async_store, open_store


def test_sync_store_api_maps_namespaces_to_keys(tmp_path: Path) -> None:
    with open_store(f"sqlite:///{tmp_path / 'pf.db'}") as store:
        lg = PlanfenceStore(store, agent="customer", claim=True)
        lg.put(("trip", "42"), "requirements", {"destination": "Lisbon"})
        lg.put(("trip", "42"), "budget", {"eur": 300})
        head = store.head("trip/42/requirements")
        item = lg.get(("trip", "42"), "requirements")
        assert item is not None and item.value == {"destination": "Lisbon", "_record_id": head}
        assert lg.get(("trip", "42"), "missing") is None
        found = lg.search(("trip",), filter={"eur": 300})
        assert [(i.namespace, i.key) for i in found] == [(("trip", "42"), "budget")]
        assert lg.list_namespaces(prefix=("trip",)) == [("trip", "42")]
        assert lg.take_reads() == {
            "trip/42/requirements": [head],
            "trip/42/budget": [store.head("trip/42/budget")],
        }
        assert lg.reads == {}
        # a read item written back does not smuggle its record id into the new version
        lg.put(("trip", "42"), "requirements", {**item.value, "destination": "Porto"})
        assert store.get(store.head("trip/42/requirements") or "").value == {"destination": "Porto"}
        with pytest.raises(ImmutableRecordError):
            lg.delete(("trip", "42"), "requirements")
        with pytest.raises(NotOwnerError):
            PlanfenceStore(store, agent="intruder").put(("trip", "42"), "budget", {"eur": 1})


async def test_async_store_api() -> None:
    store = create_async_store("memory://")
    await store.setup()
    await store.own("orders/7", "shop")
    lg = PlanfenceStore(store, agent="shop")
    await lg.aput(("orders",), "7", {"status": "paid"})
    item = await lg.aget(("orders",), "7")
    assert item is not None and item.value["status"] == "paid"
    assert [i.key for i in await lg.asearch(("orders",))] == ["7"]
    assert lg.take_reads() == {"orders/7": [await store.head("orders/7")]}
    await store.aclose()


def test_missing_extra_names_the_pip_command() -> None:
    code = (
        "import sys\n"
        "for name in ('langgraph', 'langchain', 'langchain_core'):\n"
        "    sys.modules[name] = None\n"
        "from planfence.shared_memory import MissingExtraError\n"
        "try:\n"
        "    from planfence.adapters.langgraph import PlanfenceAgentMiddleware\n"
        "except MissingExtraError as exc:\n"
        "    print(exc)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert "pip install 'planfence[langgraph]'" in out
