/* A stand-in for a Triton C++ backend the nvidia-pytriton wheel lacks (tensorrt, pytorch, ...).
 *
 * model_repo_check/triton_engine.py compiles this file into
 * <backend-directory>/<name>/libtriton_<name>.so, so Triton core loads it like the real backend
 * and runs all of its own load-time checks on the config (scheduling, instance groups, labels,
 * warmup samples). It reads no model file. Execute does what every Triton C++ backend does
 * before it runs a batch (backend_common, e.g. onnxruntime_backend's ProcessRequests): a batch
 * larger than max_batch_size fails with the same words; otherwise each request gets an empty
 * final response, which is all warmup waits for.
 *
 * The few Triton API functions used are declared here (from tritonbackend.h and tritonserver.h
 * of triton-inference-server/core r24.10), so it builds with a plain C compiler; tritonserver
 * resolves them when it loads the library.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct TRITONSERVER_Error TRITONSERVER_Error;
typedef struct TRITONSERVER_Message TRITONSERVER_Message;
typedef struct TRITONBACKEND_Model TRITONBACKEND_Model;
typedef struct TRITONBACKEND_ModelInstance TRITONBACKEND_ModelInstance;
typedef struct TRITONBACKEND_Request TRITONBACKEND_Request;
typedef struct TRITONBACKEND_Response TRITONBACKEND_Response;
typedef struct TRITONBACKEND_Input TRITONBACKEND_Input;

enum { TRITONSERVER_ERROR_INTERNAL = 1 };
enum { TRITONSERVER_REQUEST_RELEASE_ALL = 1 };
enum { TRITONSERVER_RESPONSE_COMPLETE_FINAL = 1 };

extern TRITONSERVER_Error* TRITONSERVER_ErrorNew(int code, const char* msg);
extern void TRITONSERVER_ErrorDelete(TRITONSERVER_Error* error);
extern TRITONSERVER_Error* TRITONSERVER_MessageSerializeToJson(
    TRITONSERVER_Message* message, const char** base, size_t* byte_size);
extern TRITONSERVER_Error* TRITONSERVER_MessageDelete(TRITONSERVER_Message* message);
extern TRITONSERVER_Error* TRITONBACKEND_ModelInstanceModel(
    TRITONBACKEND_ModelInstance* instance, TRITONBACKEND_Model** model);
extern TRITONSERVER_Error* TRITONBACKEND_ModelName(TRITONBACKEND_Model* model, const char** name);
extern TRITONSERVER_Error* TRITONBACKEND_ModelConfig(
    TRITONBACKEND_Model* model, uint32_t config_version, TRITONSERVER_Message** model_config);
extern TRITONSERVER_Error* TRITONBACKEND_RequestInputCount(TRITONBACKEND_Request* request, uint32_t* count);
extern TRITONSERVER_Error* TRITONBACKEND_RequestInputByIndex(
    TRITONBACKEND_Request* request, uint32_t index, TRITONBACKEND_Input** input);
extern TRITONSERVER_Error* TRITONBACKEND_InputProperties(
    TRITONBACKEND_Input* input, const char** name, int* datatype, const int64_t** shape,
    uint32_t* dims_count, uint64_t* byte_size, uint32_t* buffer_count);
extern TRITONSERVER_Error* TRITONBACKEND_ResponseNew(
    TRITONBACKEND_Response** response, TRITONBACKEND_Request* request);
extern TRITONSERVER_Error* TRITONBACKEND_ResponseSend(
    TRITONBACKEND_Response* response, uint32_t send_flags, TRITONSERVER_Error* error);
extern TRITONSERVER_Error* TRITONBACKEND_RequestRelease(TRITONBACKEND_Request* request, uint32_t release_flags);

/* max_batch_size of the model's config (the JSON Triton hands to backends). */
static long
max_batch_size(TRITONBACKEND_Model* model)
{
  TRITONSERVER_Message* config = NULL;
  const char* json = NULL;
  size_t size = 0;
  long found = 0;
  if (TRITONBACKEND_ModelConfig(model, 1, &config) != NULL) {
    return 0;
  }
  if (TRITONSERVER_MessageSerializeToJson(config, &json, &size) == NULL) {
    const char* at = strstr(json, "\"max_batch_size\":");
    if (at != NULL) {
      found = strtol(at + strlen("\"max_batch_size\":"), NULL, 10);
    }
  }
  TRITONSERVER_MessageDelete(config);
  return found;
}

/* The batch a request brings: the first dimension of its first input when the model batches. */
static uint64_t
request_batch(TRITONBACKEND_Request* request, long max_batch)
{
  uint32_t count = 0;
  TRITONBACKEND_Input* input = NULL;
  const char* name = NULL;
  int datatype = 0;
  const int64_t* shape = NULL;
  uint32_t dims = 0;
  uint64_t bytes = 0;
  uint32_t buffers = 0;
  if (max_batch == 0 || TRITONBACKEND_RequestInputCount(request, &count) != NULL || count == 0 ||
      TRITONBACKEND_RequestInputByIndex(request, 0, &input) != NULL ||
      TRITONBACKEND_InputProperties(input, &name, &datatype, &shape, &dims, &bytes, &buffers) != NULL ||
      dims == 0) {
    return 1;
  }
  return (uint64_t)shape[0];
}

TRITONSERVER_Error*
TRITONBACKEND_ModelInstanceExecute(
    TRITONBACKEND_ModelInstance* instance, TRITONBACKEND_Request** requests, const uint32_t request_count)
{
  TRITONBACKEND_Model* model = NULL;
  const char* name = "";
  long max_batch = 0;
  uint64_t total = 0;
  char reason[512];
  reason[0] = '\0';
  if (TRITONBACKEND_ModelInstanceModel(instance, &model) == NULL) {
    TRITONBACKEND_ModelName(model, &name);
    max_batch = max_batch_size(model);
  }
  for (uint32_t r = 0; r < request_count; ++r) {
    total += request_batch(requests[r], max_batch);
  }
  if (total != 1 && total > (uint64_t)max_batch) {
    snprintf(
        reason, sizeof(reason), "batch size %llu for '%s', max allowed is %ld", (unsigned long long)total, name,
        max_batch);
  }
  for (uint32_t r = 0; r < request_count; ++r) {
    TRITONBACKEND_Response* response = NULL;
    if (TRITONBACKEND_ResponseNew(&response, requests[r]) == NULL) {
      TRITONSERVER_Error* error = reason[0] ? TRITONSERVER_ErrorNew(TRITONSERVER_ERROR_INTERNAL, reason) : NULL;
      TRITONBACKEND_ResponseSend(response, TRITONSERVER_RESPONSE_COMPLETE_FINAL, error);
      if (error != NULL) { /* the sender keeps ownership of the error */
        TRITONSERVER_ErrorDelete(error);
      }
    }
    TRITONBACKEND_RequestRelease(requests[r], TRITONSERVER_REQUEST_RELEASE_ALL);
  }
  return NULL;
}
