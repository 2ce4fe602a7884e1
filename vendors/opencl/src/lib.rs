//! The dipu-rs OpenCL vendor: [`OpenClVendor`] implements
//! [`DeviceApi`](dipu_deviceapi::DeviceApi) on any OpenCL 2.0+ driver with
//! shared virtual memory (SVM), through the ICD loader `libOpenCL.so.1`,
//! opened with `libloading` at run time and never linked, so this crate
//! builds and loads on machines without OpenCL. CI runs it on PoCL's CPU
//! device.
//!
//! - One platform (`DIPU_OPENCL_PLATFORM`, else the first with a usable
//!   device: OpenCL 2.0 or later, 64-bit addresses, coarse-grained SVM),
//!   **all** its usable devices in **one** context, so any device's memory
//!   is valid on every queue and any queue can wait for any event.
//! - Device memory is SVM (`clSVMAlloc`, 256-byte aligned): fine-grained
//!   where every device has it (then HOST_ACCESSIBLE_MEMORY is reported),
//!   else coarse-grained (`DIPU_OPENCL_SVM`). The vendor keeps each
//!   device's memory budget itself (`DIPU_OPENCL_MEMORY`, else the global
//!   memory): OpenCL reports no free memory, and PoCL refuses nothing.
//! - A stream is an in-order queue with profiling; its handle is the
//!   `cl_command_queue`. An event holds the marker of its latest record.
//!   Host functions run on a thread the vendor owns (`src/hostfn.rs`).
//! - Errors name the OpenCL call and its status (`CL_INVALID_VALUE (-30)`),
//!   and keep the code.
//! - No collectives, no virtual memory: the trait's `Unsupported`.
//!
//! Nothing is initialised until the first device use. The plugin is
//! `libdipu_vendor_opencl.so` (`dipu selftest --vendor opencl`). See
//! `docs/opencl.md`.

mod allocations;
mod api;
mod bind;
mod cl;
mod config;
mod device;
mod errors;
mod events;
mod fork;
mod handles;
mod hostfn;
mod info;
mod init;
mod memory;
mod queues;
mod status;
mod streams;
mod vendor;

#[cfg(test)]
mod tests;

pub use config::{Config, Svm, ENV_MEMORY, ENV_PLATFORM, ENV_SVM};
pub use dipu_vendorkit::search::Search;
pub use vendor::{OpenClVendor, LOADER};

impl Drop for OpenClVendor {
    /// Waits for every queue, then releases what the vendor made. In a
    /// process forked after initialisation nothing of it is touched.
    fn drop(&mut self) {
        if let Some(init) = self.init.take() {
            if !init.is_own_process() {
                std::mem::forget(init);
            }
        }
    }
}

dipu_deviceapi::export_vendor!(OpenClVendor::new());
