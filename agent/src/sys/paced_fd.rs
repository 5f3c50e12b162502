//! A kernel queue read at most once per gap. While a descriptor is registered with the
//! runtime's epoll, each wake-up the kernel makes on it wakes the thread that waits
//! there: during a burst of mounts that was up to one cross-CPU wake-up and one context
//! switch per record, paid by the mounting thread too. [`PacedFd`] reads the queue when it
//! becomes readable, but never sooner than [`READ_GAP`] after its previous read: until
//! then the descriptor is taken off the epoll, so what arrives meanwhile wakes nobody and
//! is read in one go at the end of the gap. A record that comes after a quiet gap is read
//! at once; one in a burst waits at most the gap.

use std::{
    io,
    os::fd::AsRawFd,
    time::{Duration, Instant},
};

use tokio::io::{
    Interest,
    unix::{AsyncFd, AsyncFdReadyMutGuard},
};

/// The least time between two reads of a paced queue: what a record in a burst may wait
/// (the quarantine's reaction target is 2 ms at p99). tokio's timer counts whole
/// milliseconds and rounds a deadline up, so a rest lasts 0.5–1.5 ms in practice. With it,
/// 30,000 bind+umount cycles (~35 µs each) woke the fanotify agent's loop ~600–1,500 times
/// instead of ~29,000. A longer gap buys nothing on fanotify: the kernel walks the queued
/// notices of the mounting process for each new one (see docs/performance.md).
pub const READ_GAP: Duration = Duration::from_micros(500);

enum State<T: AsRawFd> {
    /// On the runtime's epoll: the next record wakes the reader.
    Registered(AsyncFd<T>),
    /// Off it until the gap has passed.
    Resting(T),
    /// Only while moving between the two (a failed registration leaves it resting).
    Gone,
}

/// A readable descriptor (fanotify group, BPF ring buffer) read at most once per `gap`.
pub struct PacedFd<T: AsRawFd> {
    state: State<T>,
    gap: Duration,
    last_read: Option<Instant>,
}

impl<T: AsRawFd> PacedFd<T> {
    /// Registers `inner` for readability with the current runtime.
    ///
    /// # Safety
    /// As [`AsyncFd::register_with_interest`]: `inner`'s descriptor stays open, and is the
    /// same, for as long as `inner` lives.
    pub unsafe fn new(inner: T, gap: Duration) -> io::Result<Self> {
        // SAFETY: upheld by the caller.
        let registered = unsafe { AsyncFd::register_with_interest(inner, Interest::READABLE) };
        Ok(Self { state: State::Registered(registered.map_err(|e| e.into_parts().1)?), gap, last_read: None })
    }

    /// Waits until the queue is readable and the gap since the previous read has passed.
    /// Cancel-safe: a wait cut short keeps the descriptor, registered or resting.
    pub async fn readable(&mut self) -> io::Result<AsyncFdReadyMutGuard<'_, T>> {
        if let Some(due) = self.last_read.map(|at| at + self.gap)
            && Instant::now() < due
        {
            self.rest();
            tokio::time::sleep_until(due.into()).await;
        }
        self.register()?;
        let State::Registered(fd) = &mut self.state else { unreachable!("registered above") };
        let guard = fd.readable_mut().await?;
        self.last_read = Some(Instant::now());
        Ok(guard)
    }

    /// The descriptor's owner, to read it without waiting (a periodic drain).
    pub fn get_mut(&mut self) -> Option<&mut T> {
        match &mut self.state {
            State::Registered(fd) => Some(fd.get_mut()),
            State::Resting(inner) => Some(inner),
            State::Gone => None,
        }
    }

    /// Takes the descriptor off the epoll (a no-op if it is not on it).
    fn rest(&mut self) {
        self.state = match std::mem::replace(&mut self.state, State::Gone) {
            State::Registered(fd) => State::Resting(fd.into_inner()),
            other => other,
        };
    }

    /// Puts the descriptor back on the epoll; what was queued meanwhile makes it readable
    /// at once (epoll checks readiness when a descriptor is added).
    fn register(&mut self) -> io::Result<()> {
        match std::mem::replace(&mut self.state, State::Gone) {
            State::Resting(inner) => {
                // SAFETY: the descriptor was registered before under `new`'s contract.
                let registered = unsafe { AsyncFd::register_with_interest(inner, Interest::READABLE) };
                match registered {
                    Ok(fd) => self.state = State::Registered(fd),
                    Err(e) => {
                        let (inner, error) = e.into_parts();
                        self.state = State::Resting(inner);
                        return Err(error);
                    }
                }
            }
            State::Registered(fd) => self.state = State::Registered(fd),
            State::Gone => return Err(io::Error::other("the paced descriptor was lost")),
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::os::fd::{AsRawFd, OwnedFd, RawFd};

    use super::*;

    /// A pipe's read end, paced; the write end to fill it.
    struct Pipe {
        read: OwnedFd,
    }

    impl AsRawFd for Pipe {
        fn as_raw_fd(&self) -> RawFd {
            self.read.as_raw_fd()
        }
    }

    fn pipe() -> (Pipe, std::fs::File) {
        let (read, write) = nix::unistd::pipe2(nix::fcntl::OFlag::O_NONBLOCK).unwrap();
        (Pipe { read }, std::fs::File::from(write))
    }

    fn drain(pipe: &Pipe) -> usize {
        let mut buf = [0u8; 64];
        let mut total = 0;
        while let Ok(n) = nix::unistd::read(&pipe.read, &mut buf) {
            if n == 0 {
                break;
            }
            total += n;
        }
        total
    }

    /// Waits for the paced pipe, reads all it holds, and clears the readiness.
    async fn read_paced(paced: &mut PacedFd<Pipe>) -> usize {
        let mut guard = paced.readable().await.unwrap();
        let n = drain(guard.get_inner());
        guard.clear_ready();
        n
    }

    #[tokio::test]
    async fn a_record_after_a_quiet_gap_is_read_at_once_and_a_burst_waits_the_gap() {
        use std::io::Write;
        let gap = Duration::from_millis(200);
        let (read, mut write) = pipe();
        // SAFETY: the pipe's read end lives as long as the PacedFd.
        let mut paced = unsafe { PacedFd::new(read, gap) }.unwrap();

        write.write_all(b"a").unwrap();
        let started = Instant::now();
        assert_eq!(read_paced(&mut paced).await, 1);
        assert!(started.elapsed() < gap / 2, "the first record is read at once");

        // Within the gap: the next read waits for its end, then finds all that came.
        write.write_all(b"bc").unwrap();
        let burst = read_paced(&mut paced).await;
        assert!(started.elapsed() >= gap, "a record in a burst waits the gap");
        assert_eq!(burst, 2, "what came while resting is read in one go");

        // After a quiet gap, at once again.
        tokio::time::sleep(gap).await;
        write.write_all(b"d").unwrap();
        let quiet = Instant::now();
        assert_eq!(read_paced(&mut paced).await, 1);
        assert!(quiet.elapsed() < gap / 2);
    }

    #[tokio::test]
    async fn a_wait_cut_short_keeps_the_descriptor() {
        use std::io::Write;
        let gap = Duration::from_millis(100);
        let (read, mut write) = pipe();
        // SAFETY: as above.
        let mut paced = unsafe { PacedFd::new(read, gap) }.unwrap();
        write.write_all(b"a").unwrap();
        read_paced(&mut paced).await;
        // Cancelled while resting: the descriptor is kept, and readable afterwards.
        let cut = tokio::time::timeout(Duration::from_millis(10), paced.readable()).await;
        assert!(cut.is_err(), "still inside the gap");
        assert_eq!(drain(paced.get_mut().expect("kept while resting")), 0);
        write.write_all(b"b").unwrap();
        assert_eq!(read_paced(&mut paced).await, 1);
    }
}
