"""The FastAPI app: POST /v1/<model> for each mapping, GET /v1/<model>/ready, GET /v1/samples/<model>,
/livez, /readyz and /metrics.

A request goes: Triton reachable and ready (else 503) -> the model ready (else 503, for that model
only) -> admitted within the gateway's own bound (else 429 at once, before the body is read) ->
the body within its size limit (else 413, before parsing) -> valid against the model's request
model (else 422 naming each bad field) -> a call slot -> one gRPC call given what is left of the
deadline, which Triton's queue policy honours too (504 past it) -> the business answer, with
Triton's echo of the request ID in X-Request-ID. A failed call is judged by `refusals.py`:
Triton's full queue is 429 for that model, a model not loaded 503 for that model, Triton
unreachable 503. Successful requests are sampled into the model's drift buffer.
"""

from __future__ import annotations

import asyncio
import re
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

from fastapi import FastAPI, Query, Request, Response
from fastapi.responses import JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from pydantic import BaseModel, ValidationError
from tritonclient.utils import InferenceServerException

from serving.gateway import refusals, schema
from serving.gateway.admission import Admission, OverloadedError
from serving.gateway.features import SampleBuffer, features
from serving.gateway.mapping import ModelMapping
from serving.gateway.metrics import Metrics
from serving.gateway.settings import Settings
from serving.gateway.upstream import Readiness, TritonPool

REQUEST_ID = "X-Request-ID"
_REQUEST_ID = re.compile(r"[A-Za-z0-9._:/+=-]{1,128}")
RETRY_AFTER = {"Retry-After": "1"}
# Triton gets what is left of the deadline and gRPC that plus this: a request still queued when
# its time runs out is dropped by Triton's queue policy, whose answer (with its reason) comes first.
QUEUE_ANSWER_GRACE_S = 0.05


@dataclass
class Reply:
    code: int
    body: dict[str, Any]
    request_id: str
    headers: dict[str, str] | None = None


class Gateway:
    """What the routes share: mappings, request models, the Triton pool, the bound, the buffers."""

    def __init__(self, settings: Settings, mappings: dict[str, ModelMapping]) -> None:
        self.settings = settings
        self.mappings = mappings
        self.models = {model: schema.request_model(mapping) for model, mapping in mappings.items()}
        self.metrics = Metrics()
        self.metrics.prepare(list(mappings))
        self.admission = Admission(settings.max_concurrency, settings.max_queue)
        self.samples = {
            model: SampleBuffer(mapping.feature_names, settings.sample_buffer, settings.sample_rate)
            for model, mapping in mappings.items()
        }
        self.pool: TritonPool | None = None
        self.readiness: Readiness | None = None

    @asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        self.pool = TritonPool(self.settings.triton_grpc, self.settings.grpc_channels)
        self.readiness = Readiness(
            self.pool,
            list(self.mappings),
            self.settings.probe_period_s,
            self.metrics.triton_ready.set,
            lambda model, ready: self.metrics.model_ready.labels(model).set(int(ready)),
            self.settings.probe_timeouts,
        )
        self.metrics.triton_ready.set(0)
        probe = asyncio.create_task(self.readiness.run())
        try:
            yield
        finally:
            probe.cancel()
            await asyncio.gather(probe, return_exceptions=True)
            await self.pool.close()

    def _refuse(self, model: str, code: int, reason: str, message: str, request_id: str) -> Reply:
        self.metrics.rejections.labels(model, reason).inc()
        return Reply(code, {"error": message}, request_id, RETRY_AFTER)

    async def infer(self, model: str, request: Request, request_id: str, started: float) -> Reply:
        assert self.readiness is not None
        if not self.readiness.ready:
            message = f"Triton is not ready: {self.readiness.reason}"
            return self._refuse(model, 503, "triton_not_ready", message, request_id)
        if not self.readiness.models_ready[model]:
            message = f"model {model} is not ready at Triton"
            return self._refuse(model, 503, "model_not_ready", message, request_id)
        try:
            async with self.admission.admitted():
                return await self._admitted(model, request, request_id, started)
        except OverloadedError as err:
            return self._refuse(model, 429, "overloaded", f"gateway overloaded: {err}", request_id)

    async def _admitted(self, model: str, request: Request, request_id: str, started: float) -> Reply:
        mapping = self.mappings[model]
        assert self.pool is not None
        try:
            body = await read_body(request, self.settings.max_body_bytes)
        except BodyTooLargeError as err:
            return Reply(413, {"error": str(err)}, request_id)
        try:
            parsed: BaseModel = self.models[model].model_validate_json(body)
        except ValidationError as err:
            return Reply(422, {"error": "invalid request", "detail": schema.field_errors(err)}, request_id)
        values = schema.arrays(mapping, parsed)
        deadline = started + self.settings.deadline_ms / 1000
        async with self.admission.turn():
            left = deadline - time.perf_counter()
            if left <= 0:
                return self._too_late(request_id)
            called = time.perf_counter()
            try:
                result = await self.pool.client().infer(
                    model,
                    schema.infer_inputs(mapping, values),
                    outputs=schema.requested_outputs(mapping),
                    request_id=request_id,
                    timeout=max(int(left * 1e6), 1),  # microseconds, for the model's queue policy
                    client_timeout=left + QUEUE_ANSWER_GRACE_S,
                )
            except InferenceServerException as err:
                refusal = refusals.classify(err.status(), err.message() or "", time.perf_counter() >= deadline)
                return self._failed(model, refusal, request_id)
            finally:
                self.metrics.upstream_latency.labels(model).observe(time.perf_counter() - called)
        buffer = self.samples[model]
        if buffer.sampled() and buffer.add(features(mapping, values)):
            self.metrics.samples_dropped.labels(model).inc()
        return Reply(200, schema.answer(mapping, result), result.get_response().id)

    def _too_late(self, request_id: str, cause: str = "") -> Reply:
        error = f"no answer within {self.settings.deadline_ms:g} ms" + (f": {cause}" if cause else "")
        return Reply(504, {"error": error}, request_id)

    def _failed(self, model: str, refusal: refusals.Refusal, request_id: str) -> Reply:
        assert self.readiness is not None
        message = f"Triton ({refusal.status or 'error'}): {refusal.message}"
        kind = refusal.kind
        if kind is refusals.Kind.TOO_LATE:
            return self._too_late(request_id, message)
        if kind is refusals.Kind.MODEL_NOT_READY:
            self.readiness.model_not_ready(model)
        elif kind is refusals.Kind.UNREACHABLE:
            self.readiness.suspect()
        if refusal.retry:
            return self._refuse(model, refusal.code, kind.value, message, request_id)
        return Reply(refusal.code, {"error": message}, request_id)


class BodyTooLargeError(Exception):
    pass


async def read_body(request: Request, limit: int) -> bytes:
    """The request's body, refused past `limit` bytes from its Content-Length or while it streams in."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise BodyTooLargeError(f"request body of {int(declared)} bytes is larger than the limit, {limit} bytes")
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise BodyTooLargeError(f"request body is larger than the limit, {limit} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


def _model_route(gateway: Gateway, model: str) -> Any:
    metrics = gateway.metrics

    async def infer(request: Request) -> Response:
        started = time.perf_counter()
        request_id = request.headers.get(REQUEST_ID) or uuid.uuid4().hex
        in_flight = metrics.in_flight.labels(model)
        in_flight.inc()
        try:
            if _REQUEST_ID.fullmatch(request_id):
                reply = await gateway.infer(model, request, request_id, started)
            else:
                detail = [{"field": f"header {REQUEST_ID}", "msg": f"must match {_REQUEST_ID.pattern}"}]
                reply = Reply(422, {"error": "invalid request", "detail": detail}, uuid.uuid4().hex)
        finally:
            in_flight.dec()
        metrics.requests.labels(model, str(reply.code)).inc()
        metrics.latency.labels(model, str(reply.code)).observe(time.perf_counter() - started)
        headers = {REQUEST_ID: reply.request_id, **(reply.headers or {})}
        return JSONResponse(reply.body, status_code=reply.code, headers=headers)

    return infer


def _unknown_model(gateway: Gateway, model: str) -> Response:
    return JSONResponse({"error": f"no mapping for model {model!r}", "models": sorted(gateway.models)}, 404)


def create_app(settings: Settings, mappings: dict[str, ModelMapping]) -> FastAPI:
    gateway = Gateway(settings, mappings)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        async with gateway.running():
            yield

    app = FastAPI(title="serving gateway", lifespan=lifespan)
    app.state.gateway = gateway
    for model, request_model in gateway.models.items():
        app.add_api_route(
            f"/v1/{model}",
            _model_route(gateway, model),
            methods=["POST"],
            summary=f"Inference on {model}",
            openapi_extra={
                "requestBody": {
                    "required": True,
                    "content": {"application/json": {"schema": request_model.model_json_schema()}},
                }
            },
        )

    @app.get("/v1/samples/{model}")
    async def samples(model: str, limit: int = Query(100, ge=1)) -> Response:
        if model not in gateway.samples:
            return _unknown_model(gateway, model)
        buffer = gateway.samples[model]
        return JSONResponse({"model": model, "features": buffer.names, "rows": buffer.drain(limit)})

    @app.get("/v1/{model}/ready")
    async def model_ready(model: str) -> Response:
        readiness = gateway.readiness
        assert readiness is not None
        if model not in gateway.models:
            return _unknown_model(gateway, model)
        ready = readiness.ready and readiness.models_ready[model]
        body = {"model": model, "ready": ready, "triton_ready": readiness.ready, "checked_at": readiness.checked_at}
        return JSONResponse(body, status_code=200 if ready else 503)

    @app.post("/v1/{model}")
    async def unknown_model(model: str) -> Response:
        return _unknown_model(gateway, model)

    @app.get("/livez")
    async def livez() -> dict[str, bool]:
        return {"live": True}

    @app.get("/readyz")
    async def readyz() -> Response:
        readiness = gateway.readiness
        assert readiness is not None
        body = {
            "ready": readiness.ready,
            "reason": readiness.reason,
            "triton": settings.triton_grpc,
            "models": readiness.models_ready,
            "checked_at": readiness.checked_at,
            "probe_period_s": readiness.period,
        }
        return JSONResponse(body, status_code=200 if readiness.ready else 503)

    @app.get("/metrics")
    async def metrics() -> Response:
        return Response(generate_latest(gateway.metrics.registry), media_type=CONTENT_TYPE_LATEST)

    return app
