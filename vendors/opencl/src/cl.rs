//! Bindings to the OpenCL ICD loader (`libOpenCL.so.1`): the functions,
//! types and constants this vendor uses, named as in the Khronos headers
//! (`CL/cl.h`, `CL/cl_ext.h`) and checked against them by the header test.
//! The status codes and their names are in [`crate::status`].

#![expect(
    non_camel_case_types,
    reason = "C names from the Khronos headers, so the header test can check them"
)]

use std::ffi::{c_char, c_void};

use crate::bind::{c_consts, c_types, library};

c_types! {
    /// `cl_int`: statuses and signed values.
    cl_int = i32;
    /// `cl_uint`.
    cl_uint = u32;
    /// `cl_ulong`.
    cl_ulong = u64;
    /// `cl_bool` (`CL_TRUE` / `CL_FALSE`).
    cl_bool = u32;
    /// `cl_bitfield`.
    cl_bitfield = u64;
    /// `cl_platform_id`.
    cl_platform_id = *mut c_void;
    /// `cl_device_id`.
    cl_device_id = *mut c_void;
    /// `cl_context`.
    cl_context = *mut c_void;
    /// `cl_command_queue`.
    cl_command_queue = *mut c_void;
    /// `cl_event`.
    cl_event = *mut c_void;
    /// `cl_mem`.
    cl_mem = *mut c_void;
    /// `cl_platform_info`.
    cl_platform_info = u32;
    /// `cl_device_info`.
    cl_device_info = u32;
    /// `cl_device_type` (a bitfield).
    cl_device_type = u64;
    /// `cl_device_svm_capabilities` (a bitfield).
    cl_device_svm_capabilities = u64;
    /// `cl_context_properties` (`intptr_t`).
    cl_context_properties = isize;
    /// `cl_queue_properties` (a bitfield).
    cl_queue_properties = u64;
    /// `cl_command_queue_properties` (a bitfield).
    cl_command_queue_properties = u64;
    /// `cl_svm_mem_flags` (a bitfield).
    cl_svm_mem_flags = u64;
    /// `cl_mem_flags` (a bitfield).
    cl_mem_flags = u64;
    /// `cl_map_flags` (a bitfield).
    cl_map_flags = u64;
    /// `cl_event_info`.
    cl_event_info = u32;
    /// `cl_profiling_info`.
    cl_profiling_info = u32;
    /// `cl_queue_priority_khr` (a bitfield, `cl_khr_priority_hints`).
    cl_queue_priority_khr = u32;
    /// The `pfn_notify` of `clSetEventCallback` (the header has no name for it).
    cl_event_notify = Option<unsafe extern "C" fn(cl_event, cl_int, *mut c_void)>,
        "void (*)(cl_event, cl_int, void *)";
    /// The `pfn_notify` of `clCreateContext` (the header has no name for it).
    cl_context_notify = Option<unsafe extern "C" fn(*const c_char, *const c_void, usize, *mut c_void)>,
        "void (*)(char const *, void const *, size_t, void *)";
}

c_consts! {
    /// `cl_bool` true.
    CL_TRUE: cl_bool = 1;
    /// `cl_bool` false.
    CL_FALSE: cl_bool = 0;

    /// The platform's version string (`OpenCL 3.0 ...`).
    CL_PLATFORM_VERSION: cl_platform_info = 0x0901;
    /// The platform's name.
    CL_PLATFORM_NAME: cl_platform_info = 0x0902;

    /// Every kind of device.
    CL_DEVICE_TYPE_ALL: cl_device_type = 0xFFFF_FFFF;

    /// Parallel compute units.
    CL_DEVICE_MAX_COMPUTE_UNITS: cl_device_info = 0x1002;
    /// Bits of a device address.
    CL_DEVICE_ADDRESS_BITS: cl_device_info = 0x100D;
    /// The largest single allocation.
    CL_DEVICE_MAX_MEM_ALLOC_SIZE: cl_device_info = 0x1010;
    /// The device's global memory.
    CL_DEVICE_GLOBAL_MEM_SIZE: cl_device_info = 0x101F;
    /// Whether the device is available.
    CL_DEVICE_AVAILABLE: cl_device_info = 0x1027;
    /// The device's name.
    CL_DEVICE_NAME: cl_device_info = 0x102B;
    /// The driver's version string.
    CL_DRIVER_VERSION: cl_device_info = 0x102D;
    /// The device's OpenCL version string (`OpenCL 3.0 ...`).
    CL_DEVICE_VERSION: cl_device_info = 0x102F;
    /// The device's extensions, separated by spaces.
    CL_DEVICE_EXTENSIONS: cl_device_info = 0x1030;
    /// The device's shared virtual memory capabilities.
    CL_DEVICE_SVM_CAPABILITIES: cl_device_info = 0x1053;

    /// Coarse-grained SVM buffers (host access between map and unmap).
    CL_DEVICE_SVM_COARSE_GRAIN_BUFFER: cl_device_svm_capabilities = 1;
    /// Fine-grained SVM buffers (host access at any time).
    CL_DEVICE_SVM_FINE_GRAIN_BUFFER: cl_device_svm_capabilities = 2;

    /// The platform a context is made on (`clCreateContext` properties).
    CL_CONTEXT_PLATFORM: cl_context_properties = 0x1084;

    /// Queue property: its flags follow.
    CL_QUEUE_PROPERTIES: cl_queue_properties = 0x1093;
    /// Queue flag: commands carry profiling times.
    CL_QUEUE_PROFILING_ENABLE: cl_command_queue_properties = 2;
    /// Queue property of `cl_khr_priority_hints`: a priority follows.
    CL_QUEUE_PRIORITY_KHR: cl_queue_properties = 0x1096;
    /// High priority (`cl_khr_priority_hints`).
    CL_QUEUE_PRIORITY_HIGH_KHR: cl_queue_priority_khr = 1;
    /// Medium priority, the default (`cl_khr_priority_hints`).
    CL_QUEUE_PRIORITY_MED_KHR: cl_queue_priority_khr = 2;

    /// Memory the device reads and writes.
    CL_MEM_READ_WRITE: cl_mem_flags = 1;
    /// A buffer in host-accessible (pinned) memory.
    CL_MEM_ALLOC_HOST_PTR: cl_mem_flags = 1 << 4;
    /// SVM flag: fine-grained.
    CL_MEM_SVM_FINE_GRAIN_BUFFER: cl_svm_mem_flags = 1 << 10;

    /// Map for reading.
    CL_MAP_READ: cl_map_flags = 1;
    /// Map for writing.
    CL_MAP_WRITE: cl_map_flags = 2;

    /// An event's execution status (`cl_int`: `CL_COMPLETE`, a positive
    /// stage, or a negative error).
    CL_EVENT_COMMAND_EXECUTION_STATUS: cl_event_info = 0x11D3;
    /// The command is done.
    CL_COMPLETE: cl_int = 0;
    /// The command waits in its queue (for earlier commands or its wait list).
    CL_QUEUED: cl_int = 3;

    /// When the command finished, in device nanoseconds.
    CL_PROFILING_COMMAND_END: cl_profiling_info = 0x1283;
}

library! {
    /// The OpenCL ICD loader and the functions this vendor calls.
    struct Cl("OpenCL ICD loader") {
        fn clGetPlatformIDs(num_entries: cl_uint, platforms: *mut cl_platform_id, num_platforms: *mut cl_uint) -> cl_int;
        fn clGetPlatformInfo(
            platform: cl_platform_id,
            param_name: cl_platform_info,
            param_value_size: usize,
            param_value: *mut c_void,
            param_value_size_ret: *mut usize,
        ) -> cl_int;
        fn clGetDeviceIDs(
            platform: cl_platform_id,
            device_type: cl_device_type,
            num_entries: cl_uint,
            devices: *mut cl_device_id,
            num_devices: *mut cl_uint,
        ) -> cl_int;
        fn clGetDeviceInfo(
            device: cl_device_id,
            param_name: cl_device_info,
            param_value_size: usize,
            param_value: *mut c_void,
            param_value_size_ret: *mut usize,
        ) -> cl_int;
        fn clCreateContext(
            properties: *const cl_context_properties,
            num_devices: cl_uint,
            devices: *const cl_device_id,
            pfn_notify: cl_context_notify,
            user_data: *mut c_void,
            errcode_ret: *mut cl_int,
        ) -> cl_context;
        fn clReleaseContext(context: cl_context) -> cl_int;
        fn clCreateCommandQueueWithProperties(
            context: cl_context,
            device: cl_device_id,
            properties: *const cl_queue_properties,
            errcode_ret: *mut cl_int,
        ) -> cl_command_queue;
        fn clRetainCommandQueue(command_queue: cl_command_queue) -> cl_int;
        fn clReleaseCommandQueue(command_queue: cl_command_queue) -> cl_int;
        fn clFlush(command_queue: cl_command_queue) -> cl_int;
        fn clSVMAlloc(context: cl_context, flags: cl_svm_mem_flags, size: usize, alignment: cl_uint) -> *mut c_void;
        fn clSVMFree(context: cl_context, svm_pointer: *mut c_void) -> ();
        fn clEnqueueSVMMemcpy(
            command_queue: cl_command_queue,
            blocking_copy: cl_bool,
            dst_ptr: *mut c_void,
            src_ptr: *const c_void,
            size: usize,
            num_events_in_wait_list: cl_uint,
            event_wait_list: *const cl_event,
            event: *mut cl_event,
        ) -> cl_int;
        fn clEnqueueSVMMemFill(
            command_queue: cl_command_queue,
            svm_ptr: *mut c_void,
            pattern: *const c_void,
            pattern_size: usize,
            size: usize,
            num_events_in_wait_list: cl_uint,
            event_wait_list: *const cl_event,
            event: *mut cl_event,
        ) -> cl_int;
        fn clEnqueueMarkerWithWaitList(
            command_queue: cl_command_queue,
            num_events_in_wait_list: cl_uint,
            event_wait_list: *const cl_event,
            event: *mut cl_event,
        ) -> cl_int;
        fn clEnqueueBarrierWithWaitList(
            command_queue: cl_command_queue,
            num_events_in_wait_list: cl_uint,
            event_wait_list: *const cl_event,
            event: *mut cl_event,
        ) -> cl_int;
        fn clWaitForEvents(num_events: cl_uint, event_list: *const cl_event) -> cl_int;
        fn clGetEventInfo(
            event: cl_event,
            param_name: cl_event_info,
            param_value_size: usize,
            param_value: *mut c_void,
            param_value_size_ret: *mut usize,
        ) -> cl_int;
        fn clGetEventProfilingInfo(
            event: cl_event,
            param_name: cl_profiling_info,
            param_value_size: usize,
            param_value: *mut c_void,
            param_value_size_ret: *mut usize,
        ) -> cl_int;
        fn clRetainEvent(event: cl_event) -> cl_int;
        fn clReleaseEvent(event: cl_event) -> cl_int;
        fn clCreateUserEvent(context: cl_context, errcode_ret: *mut cl_int) -> cl_event;
        fn clSetUserEventStatus(event: cl_event, execution_status: cl_int) -> cl_int;
        fn clSetEventCallback(
            event: cl_event,
            command_exec_callback_type: cl_int,
            pfn_notify: cl_event_notify,
            user_data: *mut c_void,
        ) -> cl_int;
        fn clCreateBuffer(
            context: cl_context,
            flags: cl_mem_flags,
            size: usize,
            host_ptr: *mut c_void,
            errcode_ret: *mut cl_int,
        ) -> cl_mem;
        fn clEnqueueMapBuffer(
            command_queue: cl_command_queue,
            buffer: cl_mem,
            blocking_map: cl_bool,
            map_flags: cl_map_flags,
            offset: usize,
            size: usize,
            num_events_in_wait_list: cl_uint,
            event_wait_list: *const cl_event,
            event: *mut cl_event,
            errcode_ret: *mut cl_int,
        ) -> *mut c_void;
        fn clEnqueueUnmapMemObject(
            command_queue: cl_command_queue,
            memobj: cl_mem,
            mapped_ptr: *mut c_void,
            num_events_in_wait_list: cl_uint,
            event_wait_list: *const cl_event,
            event: *mut cl_event,
        ) -> cl_int;
        fn clReleaseMemObject(memobj: cl_mem) -> cl_int;
    }
}

/// The shared virtual memory functions (OpenCL 2.0) that all device
/// memory comes from: a loader without them has no usable device.
pub(crate) const REQUIRED_SVM: [&str; 4] = [
    "clSVMAlloc",
    "clSVMFree",
    "clEnqueueSVMMemcpy",
    "clEnqueueSVMMemFill",
];
