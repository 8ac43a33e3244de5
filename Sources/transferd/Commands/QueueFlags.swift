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

    /// - Parameter forReading: only to look (`status`): a store that exists is
    ///   opened as it is, so a read-only queue folder can still be looked at.
    static func openStore(_ layout: QueueLayout, forReading: Bool = false) throws -> SQLiteQueueStore {
        if !(forReading && FileManager.default.fileExists(atPath: layout.database)) {
            try layout.prepare()
        }
        return try SQLiteQueueStore(path: layout.database)
    }
}
