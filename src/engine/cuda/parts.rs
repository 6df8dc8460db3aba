//! A CUDA step timed by parts: events recorded on the stream between kernels of different kinds
//! (GEMM, attention, everything else), read after the step's synchronisation, so the engine's
//! trace splits a GPU step as the CPU executor's clock laps split a CPU one
//! ([`OpTimes`](crate::engine::model::OpTimes)). Inside a captured CUDA graph the records become
//! event-record nodes and are read the same way after each replay.
//!
//! ```text
//!  start ─ e0 ─[elementwise]─ e1 ─[GEMM]─ e2 ─[elementwise]─ e3 ─[attention]─ e4 ─ …
//!  part i's time = elapsed(e_i, e_i+1); consecutive marks of one kind share an interval
//! ```

use std::sync::Arc;

use cudarc::driver::sys::{CUevent_flags, CUevent_record_flags};
use cudarc::driver::{CudaEvent, CudaStream};

use super::device::driver_error;
use crate::engine::DeviceError;
use crate::engine::model::OpTimes;

/// What a stretch of a step's kernels is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Part {
    Gemm,
    Attention,
    Elementwise,
}

/// Events of one step (or of one captured graph), reused from step to step.
#[derive(Default)]
pub struct PartTimer {
    events: Vec<CudaEvent>,
    /// The kind of the interval that ends at event `i + 1`.
    kinds: Vec<Part>,
    /// The kind of the kernels launched since the last record.
    open: Option<Part>,
    recorded: usize,
}

impl PartTimer {
    /// Starts a step: the first event goes on the stream.
    pub fn start(&mut self, stream: &Arc<CudaStream>) -> Result<(), DeviceError> {
        self.kinds.clear();
        self.recorded = 0;
        self.open = None;
        self.record(stream)
    }

    /// The kernels about to launch are of kind `part`: closes the open interval when it was
    /// another kind.
    pub fn enter(&mut self, stream: &Arc<CudaStream>, part: Part) -> Result<(), DeviceError> {
        match self.open {
            Some(open) if open == part => Ok(()),
            Some(open) => {
                self.kinds.push(open);
                self.open = Some(part);
                self.record(stream)
            }
            None => {
                self.open = Some(part);
                Ok(())
            }
        }
    }

    /// Ends the step: closes the last interval.
    pub fn finish(&mut self, stream: &Arc<CudaStream>) -> Result<(), DeviceError> {
        if let Some(open) = self.open.take() {
            self.kinds.push(open);
            self.record(stream)?;
        }
        Ok(())
    }

    fn record(&mut self, stream: &Arc<CudaStream>) -> Result<(), DeviceError> {
        if self.recorded == self.events.len() {
            let event = stream
                .context()
                .new_event(Some(CUevent_flags::CU_EVENT_DEFAULT))
                .map_err(|e| driver_error("cuEventCreate", e))?;
            self.events.push(event);
        }
        // EXTERNAL: during a stream capture a plain record only orders the capture's streams; an
        // external one becomes an event-record node that records at every replay. Outside a
        // capture it is a plain record.
        let flags = CUevent_record_flags::CU_EVENT_RECORD_EXTERNAL as std::ffi::c_uint;
        // SAFETY: the event and the stream are live and belong to the same context (the event
        // was made from the stream's).
        unsafe { cudarc::driver::sys::cuEventRecordWithFlags(self.events[self.recorded].cu_event(), stream.cu_stream(), flags) }
            .result()
            .map_err(|e| driver_error("cuEventRecordWithFlags", e))?;
        self.recorded += 1;
        Ok(())
    }

    /// The step's time by kind; call after the stream has synchronised.
    pub fn read(&self) -> Result<OpTimes, DeviceError> {
        let mut ns = [0f64; 3];
        for (i, kind) in self.kinds.iter().enumerate() {
            let ms = self.events[i].elapsed_ms(&self.events[i + 1]).map_err(|e| driver_error("cuEventElapsedTime", e))?;
            ns[*kind as usize] += f64::from(ms) * 1e6;
        }
        Ok(OpTimes { gemm_ns: ns[0] as u64, attention_ns: ns[1] as u64, elementwise_ns: ns[2] as u64, sampling_ns: 0 })
    }
}
