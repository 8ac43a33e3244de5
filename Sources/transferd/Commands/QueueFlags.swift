import Foundation
import TransferCore

/// `--queue`, `--root` and `--store`, shared by the queue commands.
enum QueueFlags {
    static let root = Flag.string("--root", value: "DIR",
                                  help: "folder that job paths are relative to and must stay in (default: the queue's parent)")

    /// How every command names the queue folder.
    static let queue = Flag.string("--queue", value: "QUEUE_DIR", help: "the queue folder (default: ./queue.d)")

    /// The queue folder: `--queue DIR`, the one way every command takes it. `run`, `status`
    /// and `ingest` (`allowsPositional`) still take it as their argument, the old way, with a
    /// warning that names the new one.
    static func layout(_ options: QueueOptions, command: String, allowsPositional: Bool = false) throws -> QueueLayout {
        var directory = options.queue
        if allowsPositional, let given = options.positionals.first {
            if let directory, directory != given {
                throw UsageError("the queue is named twice (--queue \(directory) and \(given)); give --queue QUEUE_DIR only")
            }
            if directory == nil {
                Output.err("transferd \(command): naming the queue folder as an argument is the old way and still works for now; "
                           + "write --queue \(given) (every command takes --queue)\n")
            }
            directory = given
        }
        return QueueLayout(directory: directory ?? "queue.d", root: options.root)
    }

    static let store = Flag.string("--store", value: "URL",
                                   help: "a shared queue in PostgreSQL (postgres://USER@HOST/DB) instead of the queue folder's own; "
                                       + "also TRANSFERD_STORE")

    /// `run`'s only; read here, where the shared store is opened.
    static let worker = Flag.string("--worker", value: "NAME", help: "this worker's name in a shared store (default: HOST:PID)")

    /// The shared store's URL, from `--store` or `TRANSFERD_STORE`.
    static func storeURL(_ options: QueueOptions) throws -> String? {
        guard let url = options.store ?? ProcessInfo.processInfo.environment["TRANSFERD_STORE"],
              !url.isEmpty else { return nil }
        guard PostgresQueueStore.isStoreURL(url) else {
            throw UsageError("--store (or TRANSFERD_STORE) must be a postgres:// or postgresql:// URL, not '\(Redaction.url(string: url))'")
        }
        return url
    }

    /// The queue folder's SQLite store, or the shared PostgreSQL store that `--store` names.
    /// - Parameter forReading: only to look (`status`): nothing is made or upgraded. A
    ///   store that exists is opened as it is, so a read-only queue folder can still be looked
    ///   at; a queue folder no run has worked reads as empty; a PostgreSQL store without
    ///   transferd's schema, or with an older one, is refused with what to run.
    static func openStore(_ layout: QueueLayout, _ options: QueueOptions, forReading: Bool = false,
                          leaseSeconds: Double = 30, outageSeconds: Double = 300) throws -> QueueStore {
        if let url = try storeURL(options) {
            return try PostgresQueueStore(url: url, worker: options.worker, leaseSeconds: leaseSeconds,
                                          readOnly: forReading, outageSeconds: outageSeconds)
        }
        if forReading { return try layout.openStateStoreForReading() }
        try layout.prepare()
        return try layout.openStateStore()
    }

    /// For the commands that need the queue folder with --store too (`run`, `ingest`): a
    /// missing one is said with what the command does there.
    static func requireQueueFolder(_ layout: QueueLayout, command: String, uses: String) throws {
        var isDirectory: ObjCBool = false
        guard FileManager.default.fileExists(atPath: layout.directory, isDirectory: &isDirectory), isDirectory.boolValue else {
            throw UsageError("\(layout.directory) is not a folder, and `transferd \(command)` \(uses), with --store too"
                             + " — create it (mkdir -p \(layout.directory)) or name another queue folder")
        }
    }

    /// Whether the queue folder exists (a command with --store that only updates it if so).
    static func queueFolderExists(_ layout: QueueLayout) -> Bool {
        var isDirectory: ObjCBool = false
        return FileManager.default.fileExists(atPath: layout.directory, isDirectory: &isDirectory) && isDirectory.boolValue
    }
}

/// The queue flags of one command line, typed (a command that does not take one reads nil).
struct QueueOptions: TypedOptions {
    let arguments: ParsedArguments

    init(_ arguments: ParsedArguments) { self.arguments = arguments }

    var queue: String? { arguments[QueueFlags.queue] }
    var root: String? { arguments[QueueFlags.root] }
    var store: String? { arguments[QueueFlags.store] }
    var worker: String? { arguments[QueueFlags.worker] }
}
