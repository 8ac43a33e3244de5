import Foundation

/// One hook command, started with `posix_spawn` in a process group of its own
/// so that its timeout reaches everything it starts.
///
/// - The command runs through `/usr/bin/env` (its program is found on the
///   hook's own PATH; 127 when it is not found), in `directory`, with exactly
///   `environment`, stdin from /dev/null and stdout and stderr into one pipe.
///   Descriptors other than 0, 1 and 2 are closed in the child, and its signal
///   mask and dispositions are the defaults.
/// - The command's pid is its group's id. When the command exits, or when the
///   timeout passes, whatever is still alive in the group is sent SIGTERM, and
///   SIGKILL `grace` seconds later; then the command is reaped.
/// - The command's exit is watched with `waitid(WNOWAIT)` and it is reaped with
///   `waitpid` on its own pid only: the group id cannot be reused while the
///   group is being signalled, and other users of child processes in transferd
///   lose no child's status.
/// - A process that leaves the group (`setsid`, `setpgid`) is out of reach: it
///   runs on, and output it writes after the command's end is not kept.
enum HookProcess {
    enum Ending: Equatable {
        case exited(Int32)
        case signalled(Int32)
        /// Stopped at the timeout.
        case timedOut
        /// posix_spawn failed: why.
        case notStarted(String)
    }

    struct Outcome {
        var ending: Ending
        /// The last lines the command and its group wrote (`OutputTail`).
        var output: [String]
    }

    /// How long output is waited for once the group is gone (a process outside it may hold the pipe).
    static let drainWait: TimeInterval = 1

    static func run(_ command: [String], environment: [String: String], directory: String, timeout: TimeInterval,
                    grace: TimeInterval = 2, outputLines: Int) -> Outcome {
        var pipeEnds: [Int32] = [-1, -1]
        guard makePipe(&pipeEnds) == 0 else {
            return Outcome(ending: .notStarted("cannot make a pipe for its output: \(String(cString: strerror(errno)))"), output: [])
        }
        let (readEnd, writeEnd) = (pipeEnds[0], pipeEnds[1])
        let spawned = spawn(["/usr/bin/env", "--"] + command, environment: environment, directory: directory, output: writeEnd)
        close(writeEnd)
        guard case .success(let pid) = spawned else {
            close(readEnd)
            if case .failure(let reason) = spawned { return Outcome(ending: .notStarted(reason), output: []) }
            return Outcome(ending: .notStarted("?"), output: [])
        }

        let tail = OutputTail(lines: outputLines)
        let reader = PipeReader(fd: readEnd, into: tail)
        Thread { reader.readToEnd() }.start()
        let exited = DispatchSemaphore(value: 0)
        Thread {
            // Exited, not reaped: the group id stays this command's until `waitpid` below.
            var info = siginfo_t()
            while waitid(P_PID, id_t(pid), &info, WEXITED | WNOWAIT) != 0 && errno == EINTR {}
            exited.signal()
        }.start()

        let timedOut = exited.wait(timeout: .now() + timeout) == .timedOut
        stopGroup(pid, commandExited: !timedOut, grace: grace, exited: exited)
        var status: Int32 = 0
        while waitpid(pid, &status, 0) < 0 && errno == EINTR {}
        reader.finish(within: drainWait)

        let ending: Ending
        if timedOut {
            ending = .timedOut
        } else if status & 0x7f == 0 {
            ending = .exited((status >> 8) & 0xff)
        } else {
            ending = .signalled(status & 0x7f)
        }
        return Outcome(ending: ending, output: tail.lines)
    }

    /// Ends what is left of the command's group: SIGTERM, then SIGKILL after `grace` if any of it
    /// lives on. Returns once the command itself has exited (and is ready to be reaped).
    private static func stopGroup(_ pid: pid_t, commandExited: Bool, grace: TimeInterval, exited: DispatchSemaphore) {
        var leaderGone = commandExited
        if leaderGone && !groupAlive(pid, leaderGone: true) { return }
        kill(-pid, SIGTERM)
        let deadline = Date().addingTimeInterval(grace)
        while Date() < deadline {
            if !leaderGone, exited.wait(timeout: .now() + 0.02) == .success { leaderGone = true }
            if leaderGone {
                if !groupAlive(pid, leaderGone: true) { return }
                Thread.sleep(forTimeInterval: 0.02)
            }
        }
        kill(-pid, SIGKILL)
        if !leaderGone { exited.wait() }
    }

    /// Whether a process of group `pgid` other than a finished (zombie) one is alive.
    static func groupAlive(_ pgid: pid_t, leaderGone: Bool) -> Bool {
        #if os(Linux)
        guard let names = try? FileManager.default.contentsOfDirectory(atPath: "/proc") else { return kill(-pgid, 0) == 0 }
        for name in names where name.first?.isNumber == true {
            // /proc/PID/stat: "pid (comm) state ppid pgrp ..."; comm may hold spaces and parentheses.
            guard let data = FileManager.default.contents(atPath: "/proc/\(name)/stat"),
                  let end = data.lastIndex(of: UInt8(ascii: ")")) else { continue }
            let fields = data[(end + 1)...].split(separator: UInt8(ascii: " "))
            guard fields.count > 3, let group = Int32(String(decoding: fields[fields.startIndex + 2], as: UTF8.self)),
                  group == pgid else { continue }
            if fields[fields.startIndex] != Data("Z".utf8) && fields[fields.startIndex] != Data("X".utf8) { return true }
        }
        return false
        #else
        // Without /proc: the group counts as alive while its command is.
        return !leaderGone && kill(-pgid, 0) == 0
        #endif
    }

    private enum Spawned {
        case success(pid_t)
        case failure(String)
    }

    private static func spawn(_ argv: [String], environment: [String: String], directory: String, output: Int32) -> Spawned {
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }

        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        posix_spawn_file_actions_adddup2(&actions, output, 1)
        posix_spawn_file_actions_adddup2(&actions, output, 2)
        var flags = Int32(POSIX_SPAWN_SETPGROUP) | Int32(POSIX_SPAWN_SETSIGMASK) | Int32(POSIX_SPAWN_SETSIGDEF)
        #if os(Linux)
        // transferd opens its own files close-on-exec; this closes any that are not.
        for code in [spawnAddCloseFrom(&actions, 3), spawnAddChdir(&actions, directory)] where code != 0 {
            return .failure("cannot prepare its start: \(String(cString: strerror(code)))")
        }
        #else
        flags |= Int32(POSIX_SPAWN_CLOEXEC_DEFAULT)
        let code = posix_spawn_file_actions_addchdir_np(&actions, directory)
        guard code == 0 else { return .failure("cannot prepare its start: \(String(cString: strerror(code)))") }
        #endif
        posix_spawnattr_setflags(&attributes, Int16(truncatingIfNeeded: flags))
        posix_spawnattr_setpgroup(&attributes, 0) // a group of its own, with the command's pid as its id
        var none = sigset_t()
        sigemptyset(&none)
        posix_spawnattr_setsigmask(&attributes, &none)
        var all = sigset_t()
        sigfillset(&all)
        posix_spawnattr_setsigdefault(&attributes, &all)

        let arguments: [UnsafeMutablePointer<CChar>?] = argv.map { strdup($0) } + [nil]
        let variables: [UnsafeMutablePointer<CChar>?] = environment.sorted { $0.key < $1.key }.map { strdup("\($0.key)=\($0.value)") } + [nil]
        defer {
            for pointer in arguments { free(pointer) }
            for pointer in variables { free(pointer) }
        }
        var pid: pid_t = 0
        let code = posix_spawn(&pid, argv[0], &actions, &attributes, arguments, variables)
        guard code == 0 else { return .failure("\(argv[0]): \(String(cString: strerror(code)))") }
        return .success(pid)
    }

    /// A pipe whose ends are close-on-exec from the start (no other thread's spawn can inherit them).
    private static func makePipe(_ ends: inout [Int32]) -> Int32 {
        #if os(Linux)
        return linuxPipe2(&ends, O_CLOEXEC)
        #else
        guard pipe(&ends) == 0 else { return -1 }
        for fd in ends { _ = fcntl(fd, F_SETFD, FD_CLOEXEC) }
        return 0
        #endif
    }
}

/// Reads a pipe into an `OutputTail` on a thread of its own until the pipe ends or `finish` gives up
/// on it (a process outside the hook's group may hold it open for good); closes it either way.
private final class PipeReader: Sendable {
    private let fd: Int32
    private let tail: OutputTail
    private let stopped = Locked(false)
    private let done = DispatchSemaphore(value: 0)

    init(fd: Int32, into tail: OutputTail) {
        self.fd = fd
        self.tail = tail
    }

    func readToEnd() {
        defer {
            close(fd)
            done.signal()
        }
        var buffer = [UInt8](repeating: 0, count: 16 << 10)
        while !stopped.current {
            var ready = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
            let polled = poll(&ready, 1, 100)
            if polled < 0 && errno != EINTR { return }
            guard polled > 0 else { continue }
            let count = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
            if count < 0 && errno == EINTR { continue }
            guard count > 0 else { return }
            tail.append(Data(buffer[0..<count]))
        }
    }

    /// Waits up to `seconds` for the end of the output, then stops reading.
    func finish(within seconds: TimeInterval) {
        if done.wait(timeout: .now() + seconds) == .success { return }
        stopped.withLock { $0 = true }
        done.wait()
    }
}

#if os(Linux)
// Declared by glibc only under _GNU_SOURCE, which Swift's Glibc module lacks.
@_silgen_name("pipe2")
private func linuxPipe2(_ fds: UnsafeMutablePointer<Int32>, _ flags: Int32) -> Int32
/// glibc 2.34.
@_silgen_name("posix_spawn_file_actions_addclosefrom_np")
private func spawnAddCloseFrom(_ actions: UnsafeMutablePointer<posix_spawn_file_actions_t>, _ from: Int32) -> Int32
/// glibc 2.29.
@_silgen_name("posix_spawn_file_actions_addchdir_np")
private func spawnAddChdir(_ actions: UnsafeMutablePointer<posix_spawn_file_actions_t>, _ path: UnsafePointer<CChar>) -> Int32
#endif
