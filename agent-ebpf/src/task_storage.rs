//! Task-local storage (`BPF_MAP_TYPE_TASK_STORAGE`, Linux 5.11; from tracing programs
//! 5.13): one value per thread, kept in the thread's own `task_struct`, found without a
//! hash or a lock and freed with the thread. aya-ebpf 0.2 has the inode, socket and
//! cgroup kinds but not this one; the definition follows theirs (a BTF map in `.maps`,
//! whose fields the loader reads from the object's BTF).

use core::ptr;

use aya_ebpf::{
    bindings::{BPF_F_NO_PREALLOC, BPF_LOCAL_STORAGE_GET_F_CREATE, bpf_map_type::BPF_MAP_TYPE_TASK_STORAGE},
    helpers::generated::{bpf_get_current_task_btf, bpf_task_storage_get},
};

/// A task storage map of `T`. Field order and types are what loaders read from BTF; the
/// pointers are never dereferenced.
#[repr(C)]
pub struct TaskStorage<T> {
    r#type: *const [i32; BPF_MAP_TYPE_TASK_STORAGE as usize],
    key: *const i32,
    value: *const T,
    /// The kernel requires 0: the map grows with the threads that use it.
    max_entries: *const [i32; 0],
    /// The kernel requires `BPF_F_NO_PREALLOC`.
    map_flags: *const [i32; BPF_F_NO_PREALLOC as usize],
}

// SAFETY: a placeholder the loader replaces by the map's descriptor; no state in Rust.
unsafe impl<T> Sync for TaskStorage<T> {}

impl<T> TaskStorage<T> {
    pub const fn new() -> Self {
        Self {
            r#type: ptr::null(),
            key: ptr::null(),
            value: ptr::null(),
            max_entries: ptr::null(),
            map_flags: ptr::null(),
        }
    }

    #[inline(always)]
    fn current(&self, flags: u64) -> Option<*mut T> {
        let map = ptr::from_ref(self).cast_mut().cast();
        // SAFETY: the helper takes the current task as the verifier's trusted pointer and
        // returns NULL when there is no value (or, from a nested program, when the storage
        // is busy on this CPU).
        let value = unsafe { bpf_task_storage_get(map, bpf_get_current_task_btf(), ptr::null_mut(), flags) };
        (!value.is_null()).then_some(value.cast())
    }

    /// The current thread's value, if it has one.
    #[inline(always)]
    pub fn get_current(&self) -> Option<*mut T> {
        self.current(0)
    }

    /// The current thread's value, created zeroed if it has none (`None`: no memory, or
    /// the storage is busy on this CPU).
    #[inline(always)]
    pub fn get_or_create_current(&self) -> Option<*mut T> {
        self.current(BPF_LOCAL_STORAGE_GET_F_CREATE.into())
    }
}
