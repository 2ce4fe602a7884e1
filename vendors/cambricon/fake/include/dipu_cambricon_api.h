/*
 * The subset of Cambricon's CNRT 6.x, CNCL 1.25 and CNDrv 2.15 C APIs that
 * dipu-rs uses, written by the dipu-rs project from the published
 * prototypes (the CNRT and CNCL developer guides and the documented
 * signatures). The fake libraries (vendors/cambricon/fake) implement it and
 * the vendor's tests check their bindings against it. This is not
 * Cambricon's header.
 */
#ifndef DIPU_CAMBRICON_API_H
#define DIPU_CAMBRICON_API_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- CNRT (libcnrt.so) ---- */
typedef int cnrtRet_t;
typedef void *cnrtQueue_t;
typedef void *cnrtNotifier_t;
typedef int cnrtMemTransDir_t;
typedef int cnrtDeviceAttr_t;
typedef void cnrtDeviceProp_t;
typedef void (*cnrtHostFn_t)(void *userData);

const char *cnrtGetErrorName(cnrtRet_t error);
const char *cnrtGetErrorStr(cnrtRet_t error);
cnrtRet_t cnrtGetLastError(void);
cnrtRet_t cnrtPeekAtLastError(void);
cnrtRet_t cnrtGetLibVersion(int *major, int *minor, int *patch);
cnrtRet_t cnrtGetDeviceCount(unsigned int *pCount);
cnrtRet_t cnrtGetDevice(int *pOrdinal);
cnrtRet_t cnrtSetDevice(int ordinal);
cnrtRet_t cnrtSyncDevice(void);
cnrtRet_t cnrtDeviceGetAttribute(int *pValue, cnrtDeviceAttr_t attr, int device);
cnrtRet_t cnrtGetDeviceProperties(cnrtDeviceProp_t *prop, int device);
cnrtRet_t cnrtGetDeviceProperties_V3(cnrtDeviceProp_t *prop, int device);
cnrtRet_t cnrtMemGetInfo(size_t *free, size_t *total);
cnrtRet_t cnrtMalloc(void **pPtr, size_t bytes);
cnrtRet_t cnrtFree(void *ptr);
cnrtRet_t cnrtHostMalloc(void **pPtr, size_t bytes);
cnrtRet_t cnrtFreeHost(void *ptr);
cnrtRet_t cnrtMemset(void *ptr, int value, size_t bytes);
cnrtRet_t cnrtMemsetAsync(void *ptr, int value, size_t bytes, cnrtQueue_t queue);
cnrtRet_t cnrtMemcpy(void *dst, void *src, size_t bytes, cnrtMemTransDir_t dir);
cnrtRet_t cnrtMemcpyAsync(void *dst, void *src, size_t bytes, cnrtQueue_t queue, cnrtMemTransDir_t dir);
cnrtRet_t cnrtMemcpyAsync_V2(void *dst, void *src, size_t bytes, cnrtQueue_t queue, cnrtMemTransDir_t dir);
cnrtRet_t cnrtMemcpyPeer(void *dst, int dstDev, void *src, int srcDev, size_t bytes);
cnrtRet_t cnrtMemcpyPeerAsync(void *dst, int dstDev, void *src, int srcDev, size_t bytes, cnrtQueue_t queue);
cnrtRet_t cnrtDeviceGetQueuePriorityRange(int *pMinPriority, int *pMaxPriority);
cnrtRet_t cnrtQueueCreate(cnrtQueue_t *pQueue);
cnrtRet_t cnrtQueueCreateWithPriority(cnrtQueue_t *pQueue, unsigned int flags, int priority);
cnrtRet_t cnrtQueueDestroy(cnrtQueue_t queue);
cnrtRet_t cnrtQueueSync(cnrtQueue_t queue);
cnrtRet_t cnrtQueueQuery(cnrtQueue_t queue);
cnrtRet_t cnrtQueueWaitNotifier(cnrtNotifier_t notifier, cnrtQueue_t queue, unsigned int flag);
cnrtRet_t cnrtInvokeHostFunc(cnrtQueue_t queue, cnrtHostFn_t fn, void *userData);
cnrtRet_t cnrtNotifierCreate(cnrtNotifier_t *pNotifier);
cnrtRet_t cnrtNotifierCreateWithFlags(cnrtNotifier_t *pNotifier, unsigned int flags);
cnrtRet_t cnrtNotifierDestroy(cnrtNotifier_t notifier);
cnrtRet_t cnrtPlaceNotifier(cnrtNotifier_t notifier, cnrtQueue_t queue);
cnrtRet_t cnrtQueryNotifier(cnrtNotifier_t notifier);
cnrtRet_t cnrtWaitNotifier(cnrtNotifier_t notifier);
cnrtRet_t cnrtNotifierElapsedTime(cnrtNotifier_t start, cnrtNotifier_t end, float *ms);

/* ---- CNCL (libcncl.so) ---- */
typedef int cnclResult_t;
typedef void *cnclComm_t;
typedef int cnclDataType_t;
typedef int cnclReduceOp_t;
typedef struct cnclCliqueId { char data[128]; uint64_t hash; } cnclCliqueId;

const char *cnclGetErrorStr(cnclResult_t ret);
cnclResult_t cnclGetLibVersion(int *major, int *minor, int *patch);
cnclResult_t cnclGetCliqueId(cnclCliqueId *clique_id);
cnclResult_t cnclInitComms(cnclComm_t *comms, int num_comm, const int *dev_list, const int *rank_list, int nrank, const cnclCliqueId *clique_id);
cnclResult_t cnclFreeComm(cnclComm_t comm);
cnclResult_t cnclAbortComm(cnclComm_t comm);
cnclResult_t cnclGetCommAsyncError(cnclComm_t comm);
cnclResult_t cnclAllReduce(const void *send_buffer, void *recv_buffer, size_t count, cnclDataType_t data_type, cnclReduceOp_t reduce_op, cnclComm_t comm, cnrtQueue_t queue);
cnclResult_t cnclBroadcast(const void *send_buffer, void *recv_buffer, size_t count, cnclDataType_t data_type, int root, cnclComm_t comm, cnrtQueue_t queue);
cnclResult_t cnclBcast(void *buffer, size_t count, cnclDataType_t data_type, int root, cnclComm_t comm, cnrtQueue_t queue);
cnclResult_t cnclAllGather(const void *send_buffer, void *recv_buffer, size_t count, cnclDataType_t data_type, cnclComm_t comm, cnrtQueue_t queue);
cnclResult_t cnclReduceScatter(const void *send_buffer, void *recv_buffer, size_t count, cnclDataType_t data_type, cnclReduceOp_t reduce_op, cnclComm_t comm, cnrtQueue_t queue);
cnclResult_t cnclReduce(const void *send_buffer, void *recv_buffer, size_t count, cnclDataType_t data_type, cnclReduceOp_t reduce_op, int root, cnclComm_t comm, cnrtQueue_t queue);
cnclResult_t cnclSend(void *buffer, size_t count, cnclDataType_t data_type, int dest, cnclComm_t comm, cnrtQueue_t queue);
cnclResult_t cnclRecv(void *buffer, size_t count, cnclDataType_t data_type, int source, cnclComm_t comm, cnrtQueue_t queue);
cnclResult_t cnclGroupStart(void);
cnclResult_t cnclGroupEnd(void);

/* ---- CNDrv virtual memory (libcndrv.so) ---- */
typedef int CNresult;
typedef uint64_t CNdev;
typedef uint64_t CNaddr;
typedef int CNdevice_attribute;
typedef uint64_t CNmemGenericAllocationHandle;
typedef int CNmemAllocationGranularity;
typedef struct CNmemLocation { int type; uint32_t id; } CNmemLocation;
typedef struct CNmemAllocationProp {
    int type;
    int requestedHandleTypes;
    CNmemLocation location;
    struct { unsigned char compressionType; unsigned char securityType; } allocFlags;
} CNmemAllocationProp;
typedef struct CNmemAccessDesc { CNmemLocation location; int accessFlags; int cacheType; int pinnedType; } CNmemAccessDesc;

CNresult cnGetErrorName(CNresult error, const char **pStr);
CNresult cnGetErrorString(CNresult error, const char **pStr);
CNresult cnDeviceGet(CNdev *device, int ordinal);
CNresult cnDeviceGetAttribute(int *pi, CNdevice_attribute attrib, CNdev dev);
CNresult cnMemGetAllocationGranularity(size_t *granularity, const CNmemAllocationProp *prop, CNmemAllocationGranularity option);
CNresult cnMemAddressReserve(CNaddr *ptr, size_t size, size_t alignment, CNaddr start, uint64_t flags);
CNresult cnMemAddressFree(CNaddr ptr, size_t size);
CNresult cnMemCreate(CNmemGenericAllocationHandle *handle, size_t size, const CNmemAllocationProp *prop, uint64_t flags);
CNresult cnMemRelease(CNmemGenericAllocationHandle handle);
CNresult cnMemMap(CNaddr ptr, size_t size, size_t offset, CNmemGenericAllocationHandle handle, uint64_t flags);
CNresult cnMemSetAccess(CNaddr ptr, size_t size, const CNmemAccessDesc *desc, size_t count);
CNresult cnMemUnmap(CNaddr ptr, size_t size);

#ifdef __cplusplus
}
#endif
#endif /* DIPU_CAMBRICON_API_H */
