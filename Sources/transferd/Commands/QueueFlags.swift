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

    static func openStore(_ layout: QueueLayout) throws -> SQLiteQueueStore {
        try layout.prepare()
        return try SQLiteQueueStore(path: layout.database)
    }
}
