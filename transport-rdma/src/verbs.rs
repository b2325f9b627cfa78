//! Thin owners of the verbs objects this crate uses, over `ibverbs::ffi`.
//!
//! The `ibverbs` crate's safe types borrow each other (`QueuePair<'res>` from a
//! `ProtectionDomain<'ctx>` from a `Context`), panic when a destroy call fails, fix the start
//! PSNs at 0 and post only plain signalled SENDs. A transport keeps all of them in one
//! long-lived state and needs SEND with immediate data and RDMA WRITE, so this module owns the
//! raw objects instead: [`Device`] holds the context, the protection domain, the one
//! completion queue and its completion channel, and is dropped after every [`Qp`] and
//! [`Region`] (the transport's state keeps them in that field order). Nothing here panics on
//! an error of the library; every call's failure is an `io::Error`.

use std::io;
use std::os::raw::c_int;
use std::ptr;

use ibverbs_sys as ffi;

/// The port every queue pair uses (rxe and single-port HCAs have one: 1).
const PORT: u8 = 1;

/// An open device: context, protection domain, one completion queue shared by every queue
/// pair, and the completion channel it reports to.
pub(crate) struct Device {
    ctx: *mut ffi::ibv_context,
    pd: *mut ffi::ibv_pd,
    channel: *mut ffi::ibv_comp_channel,
    cq: *mut ffi::ibv_cq,
    /// The GID this node uses (RoCE), as found in the port's table.
    pub gid: [u8; 16],
    pub gid_index: u8,
    pub lid: u16,
    /// The port's active MTU (an `ibv_mtu` value).
    pub mtu: u32,
    /// Completion-channel events received and not yet acknowledged.
    unacked_events: u32,
}

// SAFETY: the verbs objects may be used from any thread (libibverbs is thread-safe); the
// transport serializes every use behind one lock anyway.
unsafe impl Send for Device {}

fn last_err(what: &str) -> io::Error {
    let e = io::Error::last_os_error();
    io::Error::new(e.kind(), format!("{what}: {e}"))
}

fn errno(what: &str, rc: c_int) -> io::Result<()> {
    if rc == 0 {
        Ok(())
    } else {
        // Verbs calls return a positive errno, or -1 with errno set.
        let e = if rc > 0 { io::Error::from_raw_os_error(rc) } else { io::Error::last_os_error() };
        Err(io::Error::new(e.kind(), format!("{what}: {e}")))
    }
}

/// Checks that the device `name` (any device if `None`) exists, before anything waits on
/// peers: a node without one says so at once, naming what it looked for and where to go.
pub(crate) fn probe(name: Option<&str>) -> Result<(), String> {
    let list = ibverbs::devices()
        .map_err(|e| no_device(name, &format!("libibverbs could not list devices ({e})")))?;
    let names = device_names(&list);
    match name {
        None if names.is_empty() => Err(no_device(None, "libibverbs lists no device")),
        Some(n) if !names.iter().any(|d| d == n) => Err(no_device(Some(n), &listed(&names))),
        _ => Ok(()),
    }
}

fn device_names(list: &ibverbs::DeviceList) -> Vec<String> {
    list.iter().filter_map(|d| d.name().map(|n| n.to_string_lossy().into_owned())).collect()
}

fn listed(names: &[String]) -> String {
    if names.is_empty() {
        "libibverbs lists no device".into()
    } else {
        format!("libibverbs lists only {}", names.join(", "))
    }
}

/// What the kernel shows of RDMA: the device and verbs classes in sysfs.
fn sysfs_report() -> String {
    let dir = |path: &str| match std::fs::read_dir(path) {
        Ok(rd) => {
            let mut v: Vec<String> =
                rd.filter_map(|e| e.ok()).map(|e| e.file_name().to_string_lossy().into_owned()).collect();
            v.sort();
            if v.is_empty() {
                format!("{path} is empty")
            } else {
                format!("{path} has {}", v.join(", "))
            }
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => format!("{path} does not exist"),
        Err(e) => format!("{path} cannot be read ({e})"),
    };
    format!("{}; {}", dir("/sys/class/infiniband"), dir("/sys/class/infiniband_verbs"))
}

fn no_device(name: Option<&str>, why: &str) -> String {
    let wanted = match name {
        Some(n) => format!("the device `{n}` (PARMA_RDMA_DEVICE)"),
        None => "any device (PARMA_RDMA_DEVICE unset)".into(),
    };
    format!(
        "no RDMA device found. Looked for {wanted} through libibverbs: {why}; {}. An RDMA node \
         needs an InfiniBand or RoCE adapter with its kernel driver and ib_uverbs loaded \
         (`ibv_devices` lists what libibverbs sees). To try RDMA on a machine without one, run \
         parma in the Soft-RoCE VM of ../shared/tools/rdma-vm (see docs/deploy.md, section \
         \"RDMA\"); to run without RDMA, use --transport zmq",
        sysfs_report()
    )
}

impl Device {
    /// Opens the device named `name` (the first one if `None`) with a completion queue of
    /// `cq_len` entries, and picks GID `gid_index` (if `None`: the first IPv4-mapped RoCEv2
    /// entry, else index 0).
    pub fn open(name: Option<&str>, gid_index: Option<u8>, cq_len: usize) -> io::Result<Device> {
        let list = ibverbs::devices()?;
        let pick = list
            .iter()
            .find(|d| name.is_none_or(|n| d.name().is_some_and(|dn| dn.to_bytes() == n.as_bytes())));
        let Some(dev) = pick else {
            return Err(io::Error::new(
                io::ErrorKind::NotFound,
                no_device(name, &listed(&device_names(&list))),
            ));
        };
        // The crate's context gives the port and GID table; the raw one is opened again here
        // so that this module owns its lifetime.
        let (gid_table, lid, mtu) = {
            let c = dev.open()?;
            let table: Vec<ibverbs::GidEntry> = c.gid_table().to_vec();
            let mut attr = ffi::ibv_port_attr::default();
            drop(c);
            let raw = ibverbs_raw_device(&dev);
            // SAFETY: `raw` is a device of the list `dev` borrows from, alive for this call.
            let ctx = unsafe { ffi::ibv_open_device(raw) };
            if ctx.is_null() {
                return Err(last_err("ibv_open_device"));
            }
            // SAFETY: `ctx` was opened above and checked; `attr` is a port attribute struct that outlives the call.
            let rc = unsafe { ffi::ibv_query_port(ctx, PORT, &mut attr as *mut _ as *mut _) };
            // SAFETY: `ctx` was opened above and is not used after this.
            unsafe { ffi::ibv_close_device(ctx) };
            errno("ibv_query_port", rc)?;
            (table, attr.lid, attr.active_mtu)
        };
        let entry = match gid_index {
            Some(i) => gid_table.iter().find(|e| e.gid_index == u32::from(i)).ok_or_else(|| {
                io::Error::new(io::ErrorKind::NotFound, format!("GID index {i} is not in the port's table"))
            })?,
            None => gid_table
                .iter()
                .find(|e| e.gid.subnet_prefix() == 0 && e.gid.interface_id() >> 32 == 0xffff)
                .or_else(|| gid_table.first())
                .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, "the port has no GID"))?,
        };
        let gid_index = u8::try_from(entry.gid_index)
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "GID index above 255"))?;
        let gid: ffi::ibv_gid = entry.gid.into();
        // SAFETY: every field of the `ibv_gid` union is plain bytes; `raw` covers all 16.
        let gid = unsafe { gid.raw };
        let raw = ibverbs_raw_device(&dev);
        let mut d = Device {
            // SAFETY: as above: `raw` is alive while `dev`'s list is; a null result is checked below.
            ctx: unsafe { ffi::ibv_open_device(raw) },
            pd: ptr::null_mut(),
            channel: ptr::null_mut(),
            cq: ptr::null_mut(),
            gid,
            gid_index,
            lid,
            mtu,
            unacked_events: 0,
        };
        if d.ctx.is_null() {
            return Err(last_err("ibv_open_device"));
        }
        // SAFETY: `d.ctx` is open (checked); `Drop` frees what is allocated here, in reverse order.
        d.pd = unsafe { ffi::ibv_alloc_pd(d.ctx) };
        if d.pd.is_null() {
            return Err(last_err("ibv_alloc_pd"));
        }
        // SAFETY: as above.
        d.channel = unsafe { ffi::ibv_create_comp_channel(d.ctx) };
        if d.channel.is_null() {
            return Err(last_err("ibv_create_comp_channel"));
        }
        let cqe = c_int::try_from(cq_len).map_err(|_| io::Error::other("completion queue too long"))?;
        // SAFETY: `d.ctx` and `d.channel` are live (checked above).
        d.cq = unsafe { ffi::ibv_create_cq(d.ctx, cqe, ptr::null_mut(), d.channel, 0) };
        if d.cq.is_null() {
            return Err(last_err("ibv_create_cq"));
        }
        Ok(d)
    }

    /// Registers `len` zeroed bytes for local and remote access.
    pub fn region(&self, len: usize) -> io::Result<Region> {
        Region::new(self.pd, len)
    }

    /// Creates an RC queue pair on the shared completion queue, moved to INIT (so receives can
    /// be posted before it is connected).
    pub fn qp(&self, send_wr: u32, recv_wr: u32) -> io::Result<Qp> {
        let mut init = ffi::ibv_qp_init_attr {
            qp_context: ptr::null_mut(),
            send_cq: self.cq,
            recv_cq: self.cq,
            srq: ptr::null_mut(),
            cap: ffi::ibv_qp_cap {
                max_send_wr: send_wr,
                max_recv_wr: recv_wr,
                max_send_sge: 1,
                max_recv_sge: 1,
                max_inline_data: 0,
            },
            qp_type: ffi::ibv_qp_type::IBV_QPT_RC,
            sq_sig_all: 0,
        };
        // SAFETY: `self.pd` and `self.cq` live as long as the device, which outlives every `Qp` (the state's field order); `init` outlives the call.
        let qp = unsafe { ffi::ibv_create_qp(self.pd, &mut init) };
        if qp.is_null() {
            return Err(last_err("ibv_create_qp"));
        }
        let qp = Qp { qp };
        let mut attr = ffi::ibv_qp_attr {
            qp_state: ffi::ibv_qp_state::IBV_QPS_INIT,
            pkey_index: 0,
            port_num: PORT,
            qp_access_flags: (ffi::ibv_access_flags::IBV_ACCESS_LOCAL_WRITE
                | ffi::ibv_access_flags::IBV_ACCESS_REMOTE_WRITE)
                .0,
            ..Default::default()
        };
        let mask = ffi::ibv_qp_attr_mask::IBV_QP_STATE
            | ffi::ibv_qp_attr_mask::IBV_QP_PKEY_INDEX
            | ffi::ibv_qp_attr_mask::IBV_QP_PORT
            | ffi::ibv_qp_attr_mask::IBV_QP_ACCESS_FLAGS;
        // SAFETY: `qp.qp` was created above and is live; `attr` outlives the call.
        errno("ibv_modify_qp(INIT)", unsafe { ffi::ibv_modify_qp(qp.qp, &mut attr, mask.0 as c_int) })?;
        Ok(qp)
    }

    /// Takes up to `out.len()` completions; returns how many.
    pub fn poll(&self, out: &mut [ffi::ibv_wc]) -> io::Result<usize> {
        // SAFETY: `self.cq` is live while the device is; `out` is a writable array of `out.len()` completions.
        let n = unsafe {
            let ops = &mut (*(*self.cq).context).ops;
            let poll = ops.poll_cq.ok_or_else(|| io::Error::other("no poll_cq"))?;
            poll(self.cq, out.len() as c_int, out.as_mut_ptr())
        };
        usize::try_from(n).map_err(|_| io::Error::other("ibv_poll_cq failed"))
    }

    /// Asks for an event on the channel at the next completion.
    pub fn arm(&self) -> io::Result<()> {
        // SAFETY: `self.cq` is live while the device is; the provider's own entry point.
        let rc = unsafe {
            let ops = &mut (*(*self.cq).context).ops;
            let notify = ops.req_notify_cq.ok_or_else(|| io::Error::other("no req_notify_cq"))?;
            notify(self.cq, 0)
        };
        errno("ibv_req_notify_cq", rc)
    }

    /// The completion channel's file descriptor (for `poll(2)`).
    pub fn channel_fd(&self) -> c_int {
        // SAFETY: `self.channel` is live while the device is.
        unsafe { (*self.channel).fd }
    }

    /// Takes the channel's pending event, if any (the descriptor is non-blocking).
    pub fn take_event(&mut self) -> bool {
        let mut cq = ptr::null_mut();
        let mut ctx = ptr::null_mut();
        // SAFETY: the channel is live and non-blocking; `cq` and `ctx` are out-parameters that outlive the call.
        let got = unsafe { ffi::ibv_get_cq_event(self.channel, &mut cq, &mut ctx) } == 0;
        if got {
            self.unacked_events += 1;
            if self.unacked_events >= 64 {
                // SAFETY: acknowledges events taken from this channel for this completion queue, once each.
                unsafe { ffi::ibv_ack_cq_events(self.cq, self.unacked_events) };
                self.unacked_events = 0;
            }
        }
        got
    }

    /// Makes the channel's descriptor non-blocking, so that `take_event` never waits.
    pub fn channel_nonblocking(&self) -> io::Result<()> {
        let fd = self.channel_fd();
        // SAFETY: `fcntl` on a descriptor the channel owns; F_GETFL and F_SETFL take an int.
        let flags = unsafe { libc_fcntl(fd, F_GETFL, 0) };
        if flags < 0 || unsafe { libc_fcntl(fd, F_SETFL, flags | O_NONBLOCK) } < 0 {
            return Err(last_err("fcntl(O_NONBLOCK)"));
        }
        Ok(())
    }
}

impl Drop for Device {
    fn drop(&mut self) {
        // SAFETY: each object is live or null, is destroyed once, after everything made from
        // it (every `Qp` and `Region` is dropped before the device: the state's field order).
        unsafe {
            if !self.cq.is_null() {
                if self.unacked_events > 0 {
                    ffi::ibv_ack_cq_events(self.cq, self.unacked_events);
                }
                ffi::ibv_destroy_cq(self.cq);
            }
            if !self.channel.is_null() {
                ffi::ibv_destroy_comp_channel(self.channel);
            }
            if !self.pd.is_null() {
                ffi::ibv_dealloc_pd(self.pd);
            }
            if !self.ctx.is_null() {
                ffi::ibv_close_device(self.ctx);
            }
        }
    }
}

/// The raw device pointer behind the crate's `Device` (a reference to the list's pointer).
fn ibverbs_raw_device(d: &ibverbs::Device<'_>) -> *mut ffi::ibv_device {
    // `ibverbs::Device` is a newtype over `&*mut ibv_device`; its layout is that reference.
    // SAFETY: see the line above; the pointer read is valid while the list `d` borrows from is.
    let r: &*mut ffi::ibv_device = unsafe { std::mem::transmute_copy(d) };
    *r
}

// fcntl without adding the libc crate: the symbol is in the C library every Linux links.
const F_GETFL: c_int = 3;
const F_SETFL: c_int = 4;
const O_NONBLOCK: c_int = 0o4000;
extern "C" {
    #[link_name = "fcntl"]
    fn libc_fcntl(fd: c_int, cmd: c_int, arg: c_int) -> c_int;
}

/// Bytes registered with the protection domain (local write, remote write).
pub(crate) struct Region {
    mr: *mut ffi::ibv_mr,
    buf: Box<[u8]>,
}

// SAFETY: the region owns its buffer and registration; the transport uses it behind one lock.
unsafe impl Send for Region {}

impl Region {
    fn new(pd: *mut ffi::ibv_pd, len: usize) -> io::Result<Region> {
        let mut buf = vec![0u8; len.max(8)].into_boxed_slice();
        let access =
            ffi::ibv_access_flags::IBV_ACCESS_LOCAL_WRITE | ffi::ibv_access_flags::IBV_ACCESS_REMOTE_WRITE;
        // SAFETY: `buf` is a heap block that moves into the `Region` with `mr` and is deregistered (`Drop`) before it is freed; its address never changes.
        let mr = unsafe { ffi::ibv_reg_mr(pd, buf.as_mut_ptr().cast(), buf.len(), access.0 as c_int) };
        if mr.is_null() {
            return Err(last_err("ibv_reg_mr (is the locked-memory limit, ulimit -l, too low?)"));
        }
        Ok(Region { mr, buf })
    }

    pub fn bytes(&self) -> &[u8] {
        &self.buf
    }

    pub fn bytes_mut(&mut self) -> &mut [u8] {
        &mut self.buf
    }

    pub fn addr(&self) -> u64 {
        self.buf.as_ptr() as u64
    }

    pub fn lkey(&self) -> u32 {
        // SAFETY: `self.mr` is registered (checked non-null) until `Drop`.
        unsafe { (*self.mr).lkey }
    }

    pub fn rkey(&self) -> u32 {
        // SAFETY: as above.
        unsafe { (*self.mr).rkey }
    }

    /// Reads the little-endian `u64` at `off` (8-aligned) as the NIC may be writing it: a
    /// volatile read, repeated until two agree, so that a torn write is never taken.
    pub fn read_u64(&self, off: usize) -> u64 {
        let p = self.buf[off..off + 8].as_ptr().cast::<u64>();
        assert!(p.is_aligned(), "a mailbox word must be 8-aligned");
        // SAFETY: `p` points at 8 bytes inside `buf` (the slice bounds-checks) and is 8-aligned: the allocator aligns blocks this large to 16 bytes and `off` is a multiple of 8 (asserted above). Volatile: the NIC writes these bytes.
        let mut a = unsafe { ptr::read_volatile(p) };
        for _ in 0..8 {
            // SAFETY: as above.
            let b = unsafe { ptr::read_volatile(p) };
            if a == b {
                break;
            }
            a = b;
        }
        u64::from_le(a)
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        // SAFETY: `self.mr` was registered by `new` and is deregistered once, before `buf` is freed.
        unsafe { ffi::ibv_dereg_mr(self.mr) };
    }
}

/// What the peer's side of a connection tells: its queue pair and where it can be written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct QpInfo {
    pub qpn: u32,
    pub psn: u32,
    pub lid: u16,
    pub gid: [u8; 16],
    /// This node's mailbox for the peer: address and key for RDMA WRITE.
    pub mailbox_addr: u64,
    pub mailbox_rkey: u32,
    /// This node's receive ring for the peer ([`crate::Wire::Ring`]; zero otherwise).
    pub ring_addr: u64,
    pub ring_rkey: u32,
}

/// One RC queue pair.
pub(crate) struct Qp {
    qp: *mut ffi::ibv_qp,
}

// SAFETY: a queue pair may be used from any thread; the transport uses it behind one lock.
unsafe impl Send for Qp {}

impl Qp {
    pub fn num(&self) -> u32 {
        // SAFETY: `self.qp` is live until `Drop`.
        unsafe { (*self.qp).qp_num }
    }

    /// INIT → RTR → RTS toward `remote`, sending from `local_psn`. `timeout` is the verbs'
    /// exponent (4.096 µs × 2^timeout per try), `retry` the tries before an error.
    pub fn connect(
        &self,
        dev: &Device,
        local_psn: u32,
        remote: &QpInfo,
        timeout: u8,
        retry: u8,
    ) -> io::Result<()> {
        let mut ah = ffi::ibv_ah_attr { dlid: remote.lid, port_num: PORT, ..Default::default() };
        ah.is_global = 1;
        ah.grh.dgid = ffi::ibv_gid { raw: remote.gid };
        ah.grh.hop_limit = 0xff;
        ah.grh.sgid_index = dev.gid_index;
        let mut attr = ffi::ibv_qp_attr {
            qp_state: ffi::ibv_qp_state::IBV_QPS_RTR,
            path_mtu: dev.mtu,
            dest_qp_num: remote.qpn,
            rq_psn: remote.psn,
            max_dest_rd_atomic: 1,
            min_rnr_timer: 12,
            ah_attr: ah,
            ..Default::default()
        };
        let mask = ffi::ibv_qp_attr_mask::IBV_QP_STATE
            | ffi::ibv_qp_attr_mask::IBV_QP_AV
            | ffi::ibv_qp_attr_mask::IBV_QP_PATH_MTU
            | ffi::ibv_qp_attr_mask::IBV_QP_DEST_QPN
            | ffi::ibv_qp_attr_mask::IBV_QP_RQ_PSN
            | ffi::ibv_qp_attr_mask::IBV_QP_MAX_DEST_RD_ATOMIC
            | ffi::ibv_qp_attr_mask::IBV_QP_MIN_RNR_TIMER;
        // SAFETY: `self.qp` is live; `attr` outlives the call.
        errno("ibv_modify_qp(RTR)", unsafe { ffi::ibv_modify_qp(self.qp, &mut attr, mask.0 as c_int) })?;
        let mut attr = ffi::ibv_qp_attr {
            qp_state: ffi::ibv_qp_state::IBV_QPS_RTS,
            sq_psn: local_psn,
            timeout,
            retry_cnt: retry,
            // A receiver out of posted receives is a bug of the credits; retry a few times
            // rather than fail at once, but never forever.
            rnr_retry: 6,
            max_rd_atomic: 1,
            ..Default::default()
        };
        let mask = ffi::ibv_qp_attr_mask::IBV_QP_STATE
            | ffi::ibv_qp_attr_mask::IBV_QP_SQ_PSN
            | ffi::ibv_qp_attr_mask::IBV_QP_TIMEOUT
            | ffi::ibv_qp_attr_mask::IBV_QP_RETRY_CNT
            | ffi::ibv_qp_attr_mask::IBV_QP_RNR_RETRY
            | ffi::ibv_qp_attr_mask::IBV_QP_MAX_QP_RD_ATOMIC;
        // SAFETY: as above.
        errno("ibv_modify_qp(RTS)", unsafe { ffi::ibv_modify_qp(self.qp, &mut attr, mask.0 as c_int) })
    }

    /// Moves the queue pair to the error state: outstanding work completes flushed.
    pub fn fail(&self) {
        let mut attr = ffi::ibv_qp_attr { qp_state: ffi::ibv_qp_state::IBV_QPS_ERR, ..Default::default() };
        // SAFETY: `self.qp` is live; `attr` outlives the call. A failure leaves the queue pair as it was.
        unsafe { ffi::ibv_modify_qp(self.qp, &mut attr, ffi::ibv_qp_attr_mask::IBV_QP_STATE.0 as c_int) };
    }

    /// Posts one receive of `len` bytes at `off` in `r`.
    pub fn post_recv(&self, r: &Region, off: usize, len: usize, wr_id: u64) -> io::Result<()> {
        let mut sge = ffi::ibv_sge { addr: r.addr() + off as u64, length: len as u32, lkey: r.lkey() };
        let mut wr = ffi::ibv_recv_wr { wr_id, next: ptr::null_mut(), sg_list: &mut sge, num_sge: 1 };
        let mut bad = ptr::null_mut();
        // SAFETY: `self.qp` is live; `wr` and `sge` outlive the call and the provider copies
        // them; the buffer lies in `r`, registered, which the caller keeps until the receive
        // completes (the state owns both).
        let rc = unsafe {
            let ops = &mut (*(*self.qp).context).ops;
            let post = ops.post_recv.ok_or_else(|| io::Error::other("no post_recv"))?;
            post(self.qp, &mut wr, &mut bad)
        };
        errno("ibv_post_recv", rc)
    }

    /// Posts one receive with no buffer: for the completion of a WRITE with immediate data,
    /// which writes into registered memory, not into the receive.
    pub fn post_recv_empty(&self, wr_id: u64) -> io::Result<()> {
        let mut wr = ffi::ibv_recv_wr { wr_id, next: ptr::null_mut(), sg_list: ptr::null_mut(), num_sge: 0 };
        let mut bad = ptr::null_mut();
        // SAFETY: `self.qp` is a live queue pair (destroyed only on drop); the request has no
        // scatter list to point at, and the provider copies it before returning.
        let rc = unsafe {
            let ops = &mut (*(*self.qp).context).ops;
            let post = ops.post_recv.ok_or_else(|| io::Error::other("no post_recv"))?;
            post(self.qp, &mut wr, &mut bad)
        };
        errno("ibv_post_recv", rc)
    }

    /// Posts `reqs` as one linked list of work requests (one `ibv_post_send`, one doorbell),
    /// at most [`POST_BATCH`] of them. On an error some of them may have been posted; the
    /// caller fails the queue pair then.
    pub fn post_sends(&self, reqs: &[SendReq<'_>]) -> io::Result<()> {
        assert!(reqs.len() <= POST_BATCH, "post_sends takes at most POST_BATCH requests");
        if reqs.is_empty() {
            return Ok(());
        }
        let mut sges = [ffi::ibv_sge::default(); POST_BATCH];
        let mut wrs: [ffi::ibv_send_wr; POST_BATCH] = std::array::from_fn(|_| ffi::ibv_send_wr::default());
        for (i, r) in reqs.iter().enumerate() {
            sges[i] = sge(r.region, r.off, r.len);
            let mut wr = match r.op {
                SendOp::SendImm(imm) => {
                    let mut wr = send_wr(r.wr_id, ffi::ibv_wr_opcode::IBV_WR_SEND_WITH_IMM, r.signalled);
                    wr.__bindgen_anon_1.imm_data = imm.to_be();
                    wr
                }
                SendOp::Write { remote_addr, rkey } => {
                    let mut wr = send_wr(r.wr_id, ffi::ibv_wr_opcode::IBV_WR_RDMA_WRITE, r.signalled);
                    wr.wr.rdma = ffi::ibv_send_wr__bindgen_ty_2__bindgen_ty_1 { remote_addr, rkey };
                    wr
                }
                SendOp::WriteImm { remote_addr, rkey, imm } => {
                    let op = ffi::ibv_wr_opcode::IBV_WR_RDMA_WRITE_WITH_IMM;
                    let mut wr = send_wr(r.wr_id, op, r.signalled);
                    wr.wr.rdma = ffi::ibv_send_wr__bindgen_ty_2__bindgen_ty_1 { remote_addr, rkey };
                    wr.__bindgen_anon_1.imm_data = imm.to_be();
                    wr
                }
            };
            wr.num_sge = 1;
            wrs[i] = wr;
        }
        // The pointers are taken once both arrays are final: they stay put until the call
        // returns, and the provider copies the requests before it does.
        let n = reqs.len();
        let (w, g) = (wrs.as_mut_ptr(), sges.as_mut_ptr());
        for i in 0..n {
            // SAFETY: `i` and `i + 1` are below `n` ≤ POST_BATCH, the arrays' length.
            unsafe {
                (*w.add(i)).sg_list = g.add(i);
                (*w.add(i)).next = if i + 1 < n { w.add(i + 1) } else { ptr::null_mut() };
            }
        }
        let mut bad = ptr::null_mut();
        // SAFETY: `self.qp` is live; the list of `n` requests is linked above and outlives the
        // call; each scatter entry lies in a registered region that the state keeps until the
        // send is known complete.
        let rc = unsafe {
            let ops = &mut (*(*self.qp).context).ops;
            let post = ops.post_send.ok_or_else(|| io::Error::other("no post_send"))?;
            post(self.qp, w, &mut bad)
        };
        errno("ibv_post_send", rc)
    }
}

/// Most work requests [`Qp::post_sends`] posts in one call.
pub(crate) const POST_BATCH: usize = 32;

/// What one send work request does.
#[derive(Clone, Copy, Debug)]
pub(crate) enum SendOp {
    /// SEND with immediate data.
    SendImm(u32),
    /// RDMA WRITE to the peer's registered memory.
    Write { remote_addr: u64, rkey: u32 },
    /// RDMA WRITE with immediate data: the peer learns of it from a receive's completion.
    WriteImm { remote_addr: u64, rkey: u32, imm: u32 },
}

/// One send work request: `len` bytes at `off` in `region`.
#[derive(Clone, Copy)]
pub(crate) struct SendReq<'a> {
    pub region: &'a Region,
    pub off: usize,
    pub len: usize,
    pub op: SendOp,
    pub wr_id: u64,
    /// Whether it produces a completion when it succeeds (a failed one always does).
    pub signalled: bool,
}

fn sge(r: &Region, off: usize, len: usize) -> ffi::ibv_sge {
    ffi::ibv_sge { addr: r.addr() + off as u64, length: len as u32, lkey: r.lkey() }
}

fn send_wr(wr_id: u64, opcode: ffi::ibv_wr_opcode::Type, signalled: bool) -> ffi::ibv_send_wr {
    ffi::ibv_send_wr {
        wr_id,
        next: ptr::null_mut(),
        sg_list: ptr::null_mut(),
        num_sge: 0,
        opcode,
        send_flags: if signalled { ffi::ibv_send_flags::IBV_SEND_SIGNALED.0 } else { 0 },
        ..Default::default()
    }
}

impl Drop for Qp {
    fn drop(&mut self) {
        // SAFETY: `self.qp` is live and destroyed once; the device it belongs to is dropped after it.
        unsafe { ffi::ibv_destroy_qp(self.qp) };
    }
}
