import Foundation

/// The folders of a queue directory.
///
/// ```
/// queue.d/            job files dropped by users (*.json, *.urls)
///   accepted/         ingested files, moved here once their jobs are recorded
///   rejected/         invalid files, each with NAME.error beside it
///   done/  failed/    one result file per finished job (ID.json)
///   .transferd/       the state store (state.db) and the run lock
/// ```
public struct QueueLayout: Sendable {
    public let directory: String
    /// Destinations and upload sources must lie inside this folder.
    public let root: String

    public init(directory: String, root: String? = nil) {
        func absolute(_ path: String) -> String {
            let full = path.hasPrefix("/") ? path
                : (FileManager.default.currentDirectoryPath as NSString).appendingPathComponent(path)
            return PathNormalization.normalize(full)
        }
        self.directory = absolute(directory)
        self.root = root.map(absolute) ?? PathText.parent(absolute(directory))
    }

    public var accepted: String { path("accepted") }
    public var rejected: String { path("rejected") }
    public var done: String { path("done") }
    public var failed: String { path("failed") }
    package var stateDirectory: String { path(".transferd") }
    public var database: String { path(".transferd/state.db") }
    public var lockFile: String { path(".transferd/run.lock") }

    package func path(_ name: String) -> String { (directory as NSString).appendingPathComponent(name) }

    /// The folders transferd makes and writes inside the queue folder.
    package var ownFolders: [String] { [accepted, rejected, done, failed, stateDirectory] }

    /// The jobs whose hooks a run of this folder still owes (`.transferd/hooks/`): `purge`
    /// leaves them, so a hook cut off by a kill still finds its job when it runs.
    package func jobsOwedHooks() -> Set<String> {
        HookOutbox(directory: stateDirectory + "/hooks").owedJobIDs()
    }

    /// Creates the folders (`.transferd/` readable by the owner only: the store
    /// holds URLs and headers as written); throws with the path when the queue
    /// folder is missing or they cannot be made, and when one of them is a
    /// symbolic link or not a folder (`checkOwnFolder`).
    public func prepare() throws {
        var isDirectory: ObjCBool = false
        guard FileManager.default.fileExists(atPath: directory, isDirectory: &isDirectory), isDirectory.boolValue else {
            throw QueueError.noQueue(directory)
        }
        for folder in ownFolders {
            let mode: mode_t = folder == stateDirectory ? 0o700 : 0o755
            if mkdir(folder, mode) != 0 && errno != EEXIST {
                throw QueueError.notWritable(folder, String(cString: strerror(errno)))
            }
            try checkOwnFolder(folder)
        }
        // Folders made by earlier versions were 0755.
        var info = stat()
        if stat(stateDirectory, &info) == 0 && info.st_mode & 0o077 != 0 { chmod(stateDirectory, 0o700) }
    }
}

extension QueueLayout {
    /// Throws unless `folder` (one of the queue's own folders) is a real folder, not a
    /// symbolic link: transferd writes only inside the queue folder, and a link would
    /// send result files, moved job files or the store anywhere the link points.
    /// Checked at start-up and again before each file is moved or written into one
    /// (the files themselves are created without following a link).
    package func checkOwnFolder(_ folder: String) throws {
        var info = stat()
        guard lstat(folder, &info) == 0 else {
            throw QueueError.notWritable(folder, String(cString: strerror(errno)))
        }
        let shown = relative(folder)
        switch info.st_mode & S_IFMT {
        case S_IFDIR: return
        case S_IFLNK:
            let target = (try? FileManager.default.destinationOfSymbolicLink(atPath: folder)) ?? "?"
            throw QueueError.notOwnFolder(shown, "is a symbolic link to \(target)")
        default:
            throw QueueError.notOwnFolder(shown, "is not a folder")
        }
    }

    /// `queue.d/done` for a path inside the queue folder, for messages.
    private func relative(_ path: String) -> String {
        let name = (directory as NSString).lastPathComponent
        return path.hasPrefix(directory + "/") ? name + path.dropFirst(directory.count) : path
    }
}

public enum QueueError: Error, CustomStringConvertible {
    case noQueue(String)
    case locked(String)
    case unknownJob(String)
    /// A typed id prefix that several jobs' ids start with: the prefix and (some of) those ids.
    case ambiguousJob(String, matches: [String])
    /// A typed name too short, or stopping inside a number, to stand for the one id it starts.
    case partialJob(String, match: String)
    /// A folder the queue needs could not be made (a read-only queue folder, say).
    case notWritable(String, String)
    /// One of the queue's own folders is a symbolic link or not a folder: the folder, and what it is.
    case notOwnFolder(String, String)
    /// The store lost its jobs or is damaged: what happened and how to recover.
    case stateLost(String)

    public var description: String {
        switch self {
        case .notWritable(let path, let reason):
            return "cannot create \(path): \(reason); the queue folder must be writable by this user (its job files move into accepted/ and rejected/)"
        case .stateLost(let advice): return advice
        case .notOwnFolder(let path, let what):
            return "\(path) \(what); transferd writes only inside the queue folder: replace it with a directory"
                + " (mv \(path) \(path).link && mkdir \(path))"
        case .noQueue(let path): return "\(path) is not a folder; create it (mkdir -p \(path)) or name another queue"
        case .locked(let detail): return detail
        case .unknownJob(let id): return "no job with id \"\(id)\"; `transferd status` lists them"
        case .partialJob(let typed, let match):
            return "no job with id \"\(typed)\"; \(match) starts with it, but a name of under 3 characters, or one that stops"
                + " inside a number, stands for no other id: type \(match) whole if you mean it"
        case .ambiguousJob(let typed, let matches):
            let shown = matches.prefix(5).joined(separator: ", ") + (matches.count > 5 ? ", …" : "")
            return "\"\(typed)\" starts \(matches.count > 5 ? "more than 5" : "\(matches.count)") job ids (\(shown)); type more of the one you mean"
        }
    }
}

/// The lock that keeps two `transferd run` processes off one queue: an
/// exclusive `flock` on `.transferd/run.lock`, released by the kernel when the
/// process dies, so a crash never leaves a stale lock behind.
public final class RunLock {
    private let fd: Int32

    public init(path: String) throws {
        // `self.fd` is set only once the lock is held: a throwing init that had
        // set it would run `deinit` on a descriptor already closed.
        let fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0o644)
        guard fd >= 0 else { throw POSIXFailure(operation: "open", path: path) }
        guard flock(fd, LOCK_EX | LOCK_NB) == 0 else {
            var buffer = [UInt8](repeating: 0, count: 64)
            let n = pread(fd, &buffer, 63, 0)
            let holder = n > 0 ? String(decoding: buffer.prefix(n), as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines) : "?"
            close(fd)
            throw QueueError.locked("another transferd run (pid \(holder)) is working this queue; wait for it to finish or stop it first")
        }
        let pid = "\(getpid())\n"
        ftruncate(fd, 0)
        _ = pid.withCString { pwrite(fd, $0, strlen($0), 0) }
        self.fd = fd
    }

    deinit {
        // Emptied first: a pid left in the file names a run that ended badly.
        ftruncate(fd, 0)
        flock(fd, LOCK_UN)
        close(fd)
    }

    /// The pid of the run working this queue, if one is: the pid in the lock
    /// file, when that process is alive. Read without taking the lock, so a
    /// `run` starting meanwhile is never refused because of it.
    package static func activeRun(path: String) -> Int32? {
        guard let data = FileManager.default.contents(atPath: path),
              let pid = Int32(String(decoding: data, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)),
              pid > 0, kill(pid, 0) == 0 || errno == EPERM else { return nil }
        return pid
    }
}
