"""`HttpOwnerHeads`: the gate's head source over HTTP, one signed request per owner, in parallel.

Whatever cannot be verified becomes a `HeadAnswer` with an error, which the gate turns into a
block; this class never raises from `heads()` and never passes on a head it could not verify.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping

import httpx
from pydantic import ValidationError

from planfence.plugins.gate.decision import (
    OWNER_EPOCH_STALE,
    OWNER_UNAUTHENTICATED,
    OWNER_UNREACHABLE,
    HeadAnswer,
)
from planfence.shared_memory import AsyncStore
from planfence.shared_memory.records import validate_agent

from .keys import SigningKey, own_signer
from .wire import (
    DEFAULT_MAX_SKEW_S,
    ErrorBody,
    HeadsAnswer,
    Verifier,
    new_nonce,
    now_ms,
    signed_request,
    verify,
)

DEFAULT_TIMEOUT_S = 2.0
MAX_ANSWER_BYTES = 4 << 20


class _Refused(Exception):
    def __init__(self, error: str, detail: str) -> None:
        super().__init__(detail)
        self.error = error
        self.detail = detail


class HttpOwnerHeads:
    """Ask owner services for heads (a `planfence.plugins.gate.HeadSource`).

    Args:
        directory: owner agent -> base URL of its service (`http://127.0.0.1:8701`).
        keyring: the owners' public keys (a `PublicKeyring`), to verify their answers; or a
            shared-secret `Keyring` (deprecated) holding every owner's and the requester's secret.
        agent: who is asking; the owners must be able to verify it.
        signing_key: the requester's Ed25519 key (needed with a public keyring).
        timeout: seconds for each owner to answer in full; a later answer blocks.
        max_skew_s: how far an answer's timestamp may be from this process's clock.
        client: an `httpx.AsyncClient` to use (the caller closes it); by default one is created
            and closed by `aclose()`.
        transport: transport for the created client (e.g. `httpx.ASGITransport` in tests).
        store: the shared store; when given, the epochs of the answers are checked against the
            store's once they arrive, and an answer for an epoch its key has left since
            (an owner frozen or slow while its key was reassigned or transferred) is a fenced
            ex-owner's word: the check blocks with `owner_epoch_stale` (the next call asks the
            new owner). Costs one read of the asked keys' states per round.

    Raises:
        KeyringError: nothing to sign with as `agent`.
    """

    signed_by_owners = True  # every answer passed on was verified as its owner's (`HeadSource`)

    def __init__(
        self,
        directory: Mapping[str, str],
        keyring: Verifier,
        *,
        agent: str,
        signing_key: SigningKey | None = None,
        timeout: float = DEFAULT_TIMEOUT_S,
        max_skew_s: float = DEFAULT_MAX_SKEW_S,
        client: httpx.AsyncClient | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
        store: AsyncStore | None = None,
    ) -> None:
        validate_agent(agent)
        self.signer = own_signer(keyring, agent, signing_key, role="requesting")
        self.directory = {owner: url.rstrip("/") for owner, url in directory.items()}
        self.keyring = keyring
        self.agent = agent
        self.timeout = timeout
        self.max_skew_ms = int(max_skew_s * 1000)
        self.store = store
        self._own_client = client is None
        self._client = client or httpx.AsyncClient(transport=transport, timeout=timeout)

    async def heads(self, owners: Mapping[str, tuple[str, ...]]) -> Mapping[str, HeadAnswer]:
        asked = [(owner, tuple(keys)) for owner, keys in owners.items() if keys]
        results = await asyncio.gather(*(self._answer(owner, keys) for owner, keys in asked))
        out: dict[str, HeadAnswer] = {}
        for answers in results:
            out.update(answers)
        if self.store is not None:
            out = await self._epochs_rechecked(self.store, out)
        return out

    async def _epochs_rechecked(
        self, store: AsyncStore, answers: dict[str, HeadAnswer]
    ) -> dict[str, HeadAnswer]:
        said = [k for k, a in answers.items() if a.error is None and a.epoch is not None]
        if not said:
            return answers
        try:
            states = await store.states(said)
        except Exception as exc:  # cannot tell whether the answers still hold: none counts
            detail = f"could not re-read the owner epochs: {type(exc).__name__}: {exc}"
            return {
                k: HeadAnswer(error=OWNER_UNREACHABLE, detail=detail) if k in said else a
                for k, a in answers.items()
            }
        out = dict(answers)
        for key in said:
            epoch, state = answers[key].epoch, states.get(key)
            if state is None or epoch is None or epoch < state.epoch:
                now = state.epoch if state is not None else "none"
                out[key] = HeadAnswer(
                    error=OWNER_EPOCH_STALE,
                    detail=f"the answer for {key} is for owner epoch {epoch}; the key has moved "
                    f"on to epoch {now} (reassigned or transferred while its owner answered)",
                    epoch=epoch,
                    fenced=True,
                )
        return out

    async def aclose(self) -> None:
        if self._own_client:
            await self._client.aclose()

    async def _answer(self, owner: str, keys: tuple[str, ...]) -> dict[str, HeadAnswer]:
        try:
            answer = await self._ask(owner, keys)
        except _Refused as exc:
            return {k: HeadAnswer(error=exc.error, detail=exc.detail) for k in keys}
        except Exception as exc:  # whatever else went wrong, this owner's heads are unknown
            detail = f"{type(exc).__name__}: {exc}"
            return {k: HeadAnswer(error=OWNER_UNREACHABLE, detail=detail) for k in keys}
        out: dict[str, HeadAnswer] = {}
        not_owned = set(answer.not_owned)
        for key in keys:
            if key in not_owned:  # it moved since the gate read its owner: the gate re-reads
                out[key] = HeadAnswer(
                    error=OWNER_EPOCH_STALE, detail=f"{owner!r} says it does not own {key}"
                )
            elif key in answer.heads and key in answer.epochs:
                out[key] = HeadAnswer(head=answer.heads[key], epoch=answer.epochs[key])
            else:
                out[key] = HeadAnswer(
                    error=OWNER_UNAUTHENTICATED, detail=f"{owner!r} left {key} out of its answer"
                )
        return out

    async def _ask(self, owner: str, keys: tuple[str, ...]) -> HeadsAnswer:
        base = self.directory.get(owner)
        if base is None:
            raise _Refused(OWNER_UNREACHABLE, f"no address for owner {owner!r}")
        if not self.keyring.can_verify(owner):
            raise _Refused(
                OWNER_UNAUTHENTICATED, f"no secret or key for owner {owner!r} in the keyring"
            )
        nonce = new_nonce()
        request = signed_request(
            self.signer, owner=owner, keys=list(keys), nonce=nonce, at=now_ms()
        )
        try:
            status, body = await asyncio.wait_for(
                self._post(f"{base}/heads", request.model_dump_json().encode()), self.timeout
            )
        except asyncio.TimeoutError:
            raise _Refused(OWNER_UNREACHABLE, f"no answer within {self.timeout:g} s") from None
        except httpx.HTTPError as exc:
            raise _Refused(OWNER_UNREACHABLE, f"{type(exc).__name__}: {exc}") from None
        if status != 200:
            try:
                refusal = ErrorBody.model_validate_json(body)
                why = f"{refusal.error}: {refusal.detail}"
            except ValidationError:
                why = "no readable reason"
            # 401/403: the owner does not accept our credentials; anything else: no answer.
            error = OWNER_UNAUTHENTICATED if status in (401, 403) else OWNER_UNREACHABLE
            raise _Refused(error, f"HTTP {status} ({why})")
        try:
            answer = HeadsAnswer.model_validate_json(body)
        except ValidationError as exc:
            raise _Refused(
                OWNER_UNAUTHENTICATED, f"malformed answer ({exc.error_count()} invalid field(s))"
            ) from None
        if answer.agent != owner:
            raise _Refused(OWNER_UNAUTHENTICATED, f"answered as {answer.agent!r}, not {owner!r}")
        if not verify(answer, self.keyring):
            raise _Refused(OWNER_UNAUTHENTICATED, "answer signature does not verify")
        if answer.nonce != nonce:
            raise _Refused(OWNER_UNAUTHENTICATED, "answer is for another request (nonce differs)")
        skew = now_ms() - answer.at
        if abs(skew) > self.max_skew_ms:
            raise _Refused(OWNER_UNAUTHENTICATED, f"answer timestamp is {skew} ms off")
        return answer

    async def _post(self, url: str, body: bytes) -> tuple[int, bytes]:
        # identity: the signed bytes are parsed as they arrive, as they travel.
        headers = {"content-type": "application/json", "accept-encoding": "identity"}
        async with self._client.stream("POST", url, content=body, headers=headers) as response:
            chunks: list[bytes] = []
            size = 0
            async for chunk in response.aiter_raw():
                size += len(chunk)
                if size > MAX_ANSWER_BYTES:
                    raise _Refused(OWNER_UNAUTHENTICATED, f"answer over {MAX_ANSWER_BYTES} bytes")
                chunks.append(chunk)
            return response.status_code, b"".join(chunks)
