//! Process-level helpers on top of the OS: running work in a private mount namespace,
//! the kernel's monotonic clock told as wall-clock time,
//! the signals the agent stops on, background work at a lower priority, freed heap given
//! back, the mount syscalls libc does not wrap yet (fanotify mount notifications,
//! statmount, listmount, fanotify open and change notices), kernel queues read at most once per gap, and how a test that
//! cannot run here says so (`test_skip`).

pub mod background;
pub mod clock;
pub mod fanotify;
pub mod heap;
pub mod mountns;
pub mod paced_fd;
pub mod signals;
pub mod statmount;
#[doc(hidden)]
pub mod test_skip;
