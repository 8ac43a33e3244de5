import Foundation
import TransferCore

/// The queue folder argument and `--root`, shared by the queue commands.
enum QueueFlags {
    static let rootSpec = OptionSpec("--root", value: "DIR",
                                     help: "folder that job paths are relative to and must stay in (default: the queue's parent)")

    static func layout(_ arguments: ParsedArguments, positionalIndex: Int = 0) -> QueueLayout {
        let directory = arguments.positionals.count > positionalIndex ? arguments.positionals[positionalIndex] : "queue.d"
        return QueueLayout(directory: directory, root: arguments.value("--root"))
    }

    static let storeSpec = OptionSpec("--store", value: "URL",
                                      help: "a shared queue in PostgreSQL (postgres://USER@HOST/DB) instead of the queue folder's own; "
                                          + "also TRANSFERD_STORE")

    /// The shared store's URL, from `--store` or `TRANSFERD_STORE`.
    static func storeURL(_ arguments: ParsedArguments) throws -> String? {
        guard let url = arguments.value("--store") ?? ProcessInfo.processInfo.environment["TRANSFERD_STORE"],
              !url.isEmpty else { return nil }
        guard PostgresQueueStore.isStoreURL(url) else {
            throw UsageError("--store (or TRANSFERD_STORE) must be a postgres:// or postgresql:// URL, not '\(Redaction.url(string: url))'")
        }
        return url
    }

    /// The queue folder's SQLite store, or the shared PostgreSQL store that `--store` names.
    /// - Parameter forReading: only to look (`status`): a store that exists is
    ///   opened as it is, so a read-only queue folder can still be looked at.
    static func openStore(_ layout: QueueLayout, _ arguments: ParsedArguments, forReading: Bool = false,
                          leaseSeconds: Double = 30, outageSeconds: Double = 300) throws -> QueueStore {
        if let url = try storeURL(arguments) {
            return try PostgresQueueStore(url: url, worker: arguments.value("--worker"), leaseSeconds: leaseSeconds,
                                          outageSeconds: outageSeconds)
        }
        if !(forReading && FileManager.default.fileExists(atPath: layout.database)) {
            try layout.prepare()
        }
        return try layout.openStateStore()
    }
}
