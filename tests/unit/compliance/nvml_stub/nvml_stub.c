/*
 * A stand-in libnvidia-ml.so.1 for the offline tests of gpu_health/probe.py: the NVML calls the
 * probe makes, with the C signatures and structures of NVIDIA's nvml.h, answering for two GPUs.
 * GPU 0 is a healthy NVSwitch part; GPU 1 a part that answers NVML_ERROR_NOT_SUPPORTED for ECC,
 * row remapping, NVLink and the fabric. Built with -DNVML_STUB_OLD_DRIVER it leaves out the calls
 * newer than R535 (nvmlDeviceGetCurrentClocksEventReasons, nvmlDeviceGetGpuFabricInfoV), as an
 * older driver's library does. It is a fixture, not NVML: it only lets ctypes and pynvml marshal
 * real C calls (the values are the test's, tests/unit/compliance/test_nvml_stub.py).
 */
#include <string.h>

typedef int nvmlReturn_t;
typedef struct nvmlDevice_st { unsigned int index; } *nvmlDevice_t;

#define NVML_SUCCESS 0
#define NVML_ERROR_INVALID_ARGUMENT 2
#define NVML_ERROR_NOT_SUPPORTED 3
#define NVML_ERROR_INSUFFICIENT_SIZE 7
#define NVML_ERROR_ARGUMENT_VERSION_MISMATCH 25

typedef struct {
    char busIdLegacy[16];
    unsigned int domain, bus, device, pciDeviceId, pciSubSystemId;
    char busId[32];
} nvmlPciInfo_t;

typedef unsigned char nvmlGpuFabricState_t;

typedef struct {
    unsigned char clusterUuid[16];
    nvmlReturn_t status;
    unsigned int cliqueId;
    nvmlGpuFabricState_t state;
} nvmlGpuFabricInfo_t;

typedef struct {
    unsigned int version;
    unsigned char clusterUuid[16];
    nvmlReturn_t status;
    unsigned int cliqueId;
    nvmlGpuFabricState_t state;
    unsigned int healthMask;
} nvmlGpuFabricInfo_v2_t;

#define NVML_STRUCT_VERSION(size, ver) ((unsigned int)(size) | ((ver) << 24U))

static struct nvmlDevice_st devices[2] = {{0}, {1}};
static const char *names[2] = {"NVIDIA H100 80GB HBM3", "NVIDIA GeForce RTX 4090"};
static const char *uuids[2] = {"GPU-6513270e-269e-0d37-f2a7-4de452e6b438", "GPU-1f0e9a4c-62b7-4d0e-8c3a-90b1d2e3f4a5"};
static const unsigned int buses[2] = {0x18, 0x01};

static nvmlReturn_t copy(const char *text, char *out, unsigned int length) {
    if (strlen(text) + 1 > length) return NVML_ERROR_INSUFFICIENT_SIZE;
    strcpy(out, text);
    return NVML_SUCCESS;
}

const char *nvmlErrorString(nvmlReturn_t result) {
    switch (result) {
    case NVML_SUCCESS: return "Success";
    case NVML_ERROR_INVALID_ARGUMENT: return "Invalid Argument";
    case NVML_ERROR_NOT_SUPPORTED: return "Not Supported";
    case NVML_ERROR_INSUFFICIENT_SIZE: return "Insufficient Size";
    default: return "Unknown Error";
    }
}

nvmlReturn_t nvmlInit_v2(void) { return NVML_SUCCESS; }
nvmlReturn_t nvmlInitWithFlags(unsigned int flags) { (void)flags; return NVML_SUCCESS; }
nvmlReturn_t nvmlShutdown(void) { return NVML_SUCCESS; }
nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length) { return copy("580.105.08", version, length); }
nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *count) { *count = 2; return NVML_SUCCESS; }

nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device) {
    if (index > 1) return NVML_ERROR_INVALID_ARGUMENT;
    *device = &devices[index];
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t d, char *name, unsigned int length) { return copy(names[d->index], name, length); }
nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t d, char *uuid, unsigned int length) { return copy(uuids[d->index], uuid, length); }
nvmlReturn_t nvmlDeviceGetPersistenceMode(nvmlDevice_t d, unsigned int *mode) { (void)d; *mode = 1; return NVML_SUCCESS; }

nvmlReturn_t nvmlDeviceGetEccMode(nvmlDevice_t d, unsigned int *current, unsigned int *pending) {
    if (d->index == 1) return NVML_ERROR_NOT_SUPPORTED;
    *current = 1;
    *pending = 1;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t d, int sensor, unsigned int *temp) {
    if (sensor != 0) return NVML_ERROR_INVALID_ARGUMENT;
    *temp = 33 + d->index;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetRetiredPagesPendingStatus(nvmlDevice_t d, unsigned int *pending) {
    (void)d; (void)pending;
    return NVML_ERROR_NOT_SUPPORTED;
}

nvmlReturn_t nvmlDeviceGetRetiredPages(nvmlDevice_t d, int cause, unsigned int *count, unsigned long long *addresses) {
    (void)d; (void)cause; (void)count; (void)addresses;
    return NVML_ERROR_NOT_SUPPORTED;
}

nvmlReturn_t nvmlDeviceGetRemappedRows(nvmlDevice_t d, unsigned int *corr, unsigned int *unc, unsigned int *pending,
                                       unsigned int *failure) {
    if (d->index == 1) return NVML_ERROR_NOT_SUPPORTED;
    *corr = 2; *unc = 1; *pending = 1; *failure = 0;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t d, nvmlPciInfo_t *pci) {
    memset(pci, 0, sizeof(*pci));
    pci->bus = buses[d->index];
    strcpy(pci->busIdLegacy, d->index ? "0000:01:00.0" : "0000:18:00.0");
    strcpy(pci->busId, d->index ? "00000000:01:00.0" : "00000000:18:00.0");
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetCurrPcieLinkGeneration(nvmlDevice_t d, unsigned int *gen) { *gen = d->index ? 4 : 1; return NVML_SUCCESS; }
nvmlReturn_t nvmlDeviceGetMaxPcieLinkGeneration(nvmlDevice_t d, unsigned int *gen) { *gen = d->index ? 4 : 5; return NVML_SUCCESS; }
nvmlReturn_t nvmlDeviceGetCurrPcieLinkWidth(nvmlDevice_t d, unsigned int *width) { *width = d->index ? 8 : 16; return NVML_SUCCESS; }
nvmlReturn_t nvmlDeviceGetMaxPcieLinkWidth(nvmlDevice_t d, unsigned int *width) { (void)d; *width = 16; return NVML_SUCCESS; }

nvmlReturn_t nvmlDeviceGetNvLinkState(nvmlDevice_t d, unsigned int link, unsigned int *active) {
    if (d->index == 1) return NVML_ERROR_NOT_SUPPORTED;
    if (link >= 18) return NVML_ERROR_INVALID_ARGUMENT;
    *active = link != 5;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetTotalEccErrors(nvmlDevice_t d, int errorType, int counterType, unsigned long long *count) {
    if (d->index == 1) return NVML_ERROR_NOT_SUPPORTED;
    /* corrected/uncorrected x volatile/aggregate, told apart so a swapped argument shows */
    *count = 10000000000ULL * (unsigned long long)(counterType + 1) + (unsigned long long)errorType;
    return NVML_SUCCESS;
}

static nvmlReturn_t reasons(nvmlDevice_t d, unsigned long long *mask) {
    *mask = d->index ? 0x1ULL : 0x48ULL | (1ULL << 40);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetCurrentClocksThrottleReasons(nvmlDevice_t d, unsigned long long *mask) { return reasons(d, mask); }

static void fill(unsigned char *uuid, nvmlReturn_t *status, unsigned int *clique, nvmlGpuFabricState_t *state) {
    for (int i = 0; i < 16; i++) uuid[i] = (unsigned char)(0xa0 + i);
    *status = NVML_SUCCESS;
    *clique = 32766;
    *state = 3;
}

nvmlReturn_t nvmlDeviceGetGpuFabricInfo(nvmlDevice_t d, nvmlGpuFabricInfo_t *info) {
    if (d->index == 1) return NVML_ERROR_NOT_SUPPORTED;
    fill(info->clusterUuid, &info->status, &info->cliqueId, &info->state);
    return NVML_SUCCESS;
}

#ifndef NVML_STUB_OLD_DRIVER
nvmlReturn_t nvmlDeviceGetCurrentClocksEventReasons(nvmlDevice_t d, unsigned long long *mask) { return reasons(d, mask); }

nvmlReturn_t nvmlDeviceGetGpuFabricInfoV(nvmlDevice_t d, nvmlGpuFabricInfo_v2_t *info) {
    if (info->version != NVML_STRUCT_VERSION(sizeof(nvmlGpuFabricInfo_v2_t), 2)) return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    if (d->index == 1) return NVML_ERROR_NOT_SUPPORTED;
    fill(info->clusterUuid, &info->status, &info->cliqueId, &info->state);
    info->healthMask = 426;
    return NVML_SUCCESS;
}
#endif
