import Foundation

/// The files transferd writes for itself, which a folder upload never sends,
/// whatever its include and exclude globs say: a queue folder's whole content
/// (job files hold URLs and headers, `.transferd/` the store, its WAL and the
/// API token), any `.transferd` folder, and a download's partial file and
/// checkpoint (any name holding `.transferd-part`, which `get s3://` also refuses
/// to save keys under, `PartialNames`), and those of earlier versions: a
/// `NAME.part.state` checkpoint, and `NAME.part` beside one.
enum OwnFiles {
    /// Why the file at `relative` (a path below the uploaded folder, "/"-separated) is
    /// transferd's own, or nil for a user's file. `queueFolders` are the folders below the
    /// upload that `isQueueFolder` found ("" for the uploaded folder itself).
    /// `siblings` are the other files found (relative paths), to tell an earlier version's
    /// partial file (`NAME.part` beside `NAME.part.state`) from a user's `NAME.part`.
    static func reason(for relative: String, queueFolders: Set<String>, siblings: Set<String> = []) -> String? {
        let components = relative.split(separator: "/", omittingEmptySubsequences: true).map(String.init)
        guard let name = components.last else { return nil }
        if queueFolders.contains("") { return "the uploaded folder is a transferd queue folder" }
        for depth in 1..<max(1, components.count) {
            let folder = components[0..<depth].joined(separator: "/")
            if queueFolders.contains(folder) { return "in the transferd queue folder \(folder)/" }
        }
        if components.contains(stateFolder) { return "in a \(stateFolder)/ state folder" }
        if PartialNames.holdsMarker(name) { return "a partial download or its checkpoint" }
        if hasSuffix(name, ".part.state") { return "an earlier version's checkpoint of a partial download" }
        if name.contains(".part.state."), hasSuffix(name, ".tmp") { return "an earlier version's checkpoint being written" }
        if hasSuffix(name, ".part"), siblings.contains(relative + ".state") { return "an earlier version's partial download" }
        return nil
    }

    /// The name of the folder transferd keeps a queue's state in (`QueueLayout.stateDirectory`).
    static let stateFolder = ".transferd"

    /// Whether `path` is a queue folder: it holds a `.transferd` folder with transferd's state
    /// database (`state.db`) or its run lock (`run.lock`, there with any store) in it. The folder's
    /// name does not matter.
    static func isQueueFolder(_ path: String) -> Bool {
        let layout = QueueLayout(directory: path)
        var info = stat()
        guard lstat(layout.stateDirectory, &info) == 0, info.st_mode & S_IFMT == S_IFDIR else { return false }
        return [layout.database, layout.lockFile].contains { file in
            var info = stat()
            return lstat(file, &info) == 0 && info.st_mode & S_IFMT == S_IFREG
        }
    }

    /// Byte-wise, like the rest of transferd's path handling (String's would compare canonically).
    private static func hasSuffix(_ name: String, _ suffix: String) -> Bool {
        name.utf8.reversed().starts(with: suffix.utf8.reversed())
    }
}
