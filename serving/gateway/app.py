"""The FastAPI app: POST /v1/<model> for each mapping, GET /v1/samples/<model>, /livez, /readyz
and /metrics.

A request goes: Triton ready (else 503) -> body valid against the model's request model (else
422 naming each bad field) -> a slot of the gateway's own bound (else 429) -> one gRPC call with
the deadline (504 past it; 503 when Triton is unreachable, 502 when it refuses) -> the business
answer, with Triton's echo of the request ID in X-Request-ID. Successful requests are sampled
into the model's drift buffer.
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

from serving.gateway import schema
from serving.gateway.admission import Admission, OverloadedError
from serving.gateway.features import SampleBuffer, features
from serving.gateway.mapping import ModelMapping
from serving.gateway.metrics import Metrics
from serving.gateway.settings import Settings
from serving.gateway.upstream import Readiness, TritonPool

REQUEST_ID = "X-Request-ID"
_REQUEST_ID = re.compile(r"[A-Za-z0-9._:/+=-]{1,128}")
RETRY_AFTER = {"Retry-After": "1"}


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
            self.pool, list(self.mappings), self.settings.probe_period_s, self.metrics.triton_ready.set
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

    async def infer(self, model: str, body: bytes, request_id: str) -> Reply:
        mapping = self.mappings[model]
        assert self.readiness is not None and self.pool is not None
        if not self.readiness.ready:
            message = f"Triton is not ready: {self.readiness.reason}"
            return self._refuse(model, 503, "triton_not_ready", message, request_id)
        try:
            request: BaseModel = self.models[model].model_validate_json(body)
        except ValidationError as err:
            return Reply(422, {"error": "invalid request", "detail": schema.field_errors(err)}, request_id)
        values = schema.arrays(mapping, request)
        try:
            async with self.admission.slot():
                started = time.perf_counter()
                try:
                    result = await self.pool.client().infer(
                        model,
                        schema.infer_inputs(mapping, values),
                        outputs=schema.requested_outputs(mapping),
                        request_id=request_id,
                        client_timeout=self.settings.deadline_ms / 1000,
                    )
                finally:
                    self.metrics.upstream_latency.labels(model).observe(time.perf_counter() - started)
        except OverloadedError as err:
            return self._refuse(model, 429, "overloaded", f"gateway overloaded: {err}", request_id)
        except InferenceServerException as err:
            return self._failed(model, err, request_id)
        buffer = self.samples[model]
        if buffer.sampled() and buffer.add(features(mapping, values)):
            self.metrics.samples_dropped.labels(model).inc()
        return Reply(200, schema.answer(mapping, result), result.get_response().id)

    def _failed(self, model: str, err: InferenceServerException, request_id: str) -> Reply:
        status = (err.status() or "").removeprefix("StatusCode.")
        message = f"Triton ({status or 'error'}): {err.message()}"
        if status == "DEADLINE_EXCEEDED":
            return Reply(504, {"error": f"no answer within {self.settings.deadline_ms:g} ms: {message}"}, request_id)
        if status == "UNAVAILABLE":
            assert self.readiness is not None
            self.readiness.unreachable(message)
            return Reply(503, {"error": message}, request_id, RETRY_AFTER)
        return Reply(502, {"error": message}, request_id)


def _model_route(gateway: Gateway, model: str) -> Any:
    metrics = gateway.metrics

    async def infer(request: Request) -> Response:
        started = time.perf_counter()
        request_id = request.headers.get(REQUEST_ID) or uuid.uuid4().hex
        in_flight = metrics.in_flight.labels(model)
        in_flight.inc()
        try:
            if _REQUEST_ID.fullmatch(request_id):
                reply = await gateway.infer(model, await request.body(), request_id)
            else:
                detail = [{"field": f"header {REQUEST_ID}", "msg": f"must match {_REQUEST_ID.pattern}"}]
                reply = Reply(422, {"error": "invalid request", "detail": detail}, uuid.uuid4().hex)
        finally:
            in_flight.dec()
        metrics.requests.labels(model, str(reply.code)).inc()
        metrics.latency.labels(model).observe(time.perf_counter() - started)
        headers = {REQUEST_ID: reply.request_id, **(reply.headers or {})}
        return JSONResponse(reply.body, status_code=reply.code, headers=headers)

    return infer


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
            return JSONResponse({"error": f"no mapping for model {model!r}", "models": sorted(gateway.samples)}, 404)
        buffer = gateway.samples[model]
        return JSONResponse({"model": model, "features": buffer.names, "rows": buffer.drain(limit)})

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
