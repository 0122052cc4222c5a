"""The request model of each mapped model, and the conversions around Triton.

`request_model()` builds a pydantic model from a mapping, so the JSON a client sends is checked
against config.pbtxt's data types and shapes: a list input is nested lists of exactly the
tensor's shape with numbers of its type (integers within the type's range, no NaN or infinity),
a base64 input decodes to exactly the tensor's byte size; unknown fields are refused.
`field_errors()` turns pydantic's errors into `{"field": "embedding.3", "msg": ...}` entries.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable
from typing import Annotated, Any

import numpy as np
from annotated_types import Len
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, Strict, ValidationError, create_model
from tritonclient.grpc import InferInput, InferRequestedOutput, InferResult

from serving.gateway.mapping import InputField, ModelMapping, OutputField, Tensor


def _number(tensor: Tensor) -> Any:
    if np.issubdtype(tensor.dtype, np.integer):
        info = np.iinfo(tensor.dtype)
        return Annotated[int, Strict(), Field(ge=int(info.min), le=int(info.max))]
    if tensor.dtype == np.bool_:
        return Annotated[bool, Strict()]
    return Annotated[float, Strict(), Field(allow_inf_nan=False)]


def _nested(tensor: Tensor) -> Any:
    kind = _number(tensor)
    for size in reversed(tensor.shape):
        kind = Annotated[list[kind], Len(size, size)]  # type: ignore[valid-type]
    return kind


def _decoder(tensor: Tensor) -> Callable[[str], bytes]:
    size = int(np.prod(tensor.shape)) * tensor.dtype.itemsize

    def decode(text: str) -> bytes:
        try:
            raw = base64.b64decode(text, validate=True)
        except binascii.Error as err:
            raise ValueError(f"not base64: {err}") from None
        if len(raw) != size:
            shape = "x".join(map(str, tensor.shape))
            raise ValueError(f"decodes to {len(raw)} bytes; {tensor.datatype} {shape} is {size} bytes")
        return raw

    return decode


def _field_type(field: InputField) -> Any:
    if field.encoding == "base64":
        return Annotated[str, Strict(), AfterValidator(_decoder(field.tensor))]
    return _nested(field.tensor)


def request_model(mapping: ModelMapping) -> type[BaseModel]:
    fields: dict[str, Any] = {field.field: (_field_type(field), ...) for field in mapping.inputs}
    name = "".join(part.title() for part in mapping.model.replace("_", "-").split("-")) + "Request"
    return create_model(name, __config__=ConfigDict(extra="forbid"), **fields)


def field_errors(error: ValidationError) -> list[dict[str, str]]:
    """One entry per problem, `field` the dotted path into the body (`body` for the body itself)."""
    return [
        {"field": ".".join(map(str, item["loc"])) or "body", "msg": item["msg"]}
        for item in error.errors(include_input=False, include_url=False)
    ]


def arrays(mapping: ModelMapping, request: BaseModel) -> dict[str, np.ndarray]:
    """Business field -> the array of one request (no batch axis), in the tensor's dtype."""
    found = {}
    for field in mapping.inputs:
        value = getattr(request, field.field)
        dtype = field.tensor.dtype.newbyteorder("<")
        array = np.frombuffer(value, dtype) if field.encoding == "base64" else np.asarray(value, dtype)
        found[field.field] = array.reshape(field.tensor.shape)
    return found


def infer_inputs(mapping: ModelMapping, values: dict[str, np.ndarray]) -> list[InferInput]:
    inputs = []
    for field in mapping.inputs:
        array = values[field.field]
        if mapping.batched:
            array = array[np.newaxis]
        tensor = InferInput(field.tensor.name, list(array.shape), field.tensor.datatype)
        tensor.set_data_from_numpy(np.ascontiguousarray(array, field.tensor.dtype))
        inputs.append(tensor)
    return inputs


def requested_outputs(mapping: ModelMapping) -> list[InferRequestedOutput]:
    return [InferRequestedOutput(name) for name in dict.fromkeys(field.tensor.name for field in mapping.outputs)]


def _encode(field: OutputField, array: np.ndarray) -> Any:
    if field.encoding == "list":
        return array.tolist()
    if field.encoding == "base64":
        return base64.b64encode(np.ascontiguousarray(array, field.tensor.dtype.newbyteorder("<")).tobytes()).decode()
    if field.encoding == "labelled":
        return dict(zip(field.labels, array.ravel().tolist(), strict=True))
    return field.labels[int(np.argmax(array))]


def answer(mapping: ModelMapping, result: InferResult) -> dict[str, Any]:
    """The business answer: each output field from its tensor (the batch axis dropped)."""
    found = {}
    for field in mapping.outputs:
        array = result.as_numpy(field.tensor.name)
        if array is None:
            raise ValueError(f"Triton's answer of {mapping.model} lacks output {field.tensor.name!r}")
        found[field.field] = _encode(field, array[0] if mapping.batched else array)
    return found
