import Foundation

/// `--dry-run` and `--delete` for a prefix downloaded into a folder (`get s3://…/ -o DIR`):
/// the plan comes from one listing of the prefix and one walk of the folder, before any
/// byte moves; the deletions are made once the download succeeded, each only while the
/// file is still the one planned (`FileStamp`) and is none the download saved.
package struct FolderSync: Sendable {
    package var preview = SyncPreview()
    /// The files to delete as the walk found them.
    var deletions: [(relative: String, identity: FileStamp)] = []

    /// What a download of `options`' prefix into its folder would do, and what `--delete` would
    /// remove; `preview.refusal` says why that delete is refused (`SyncPlan.refusal`).
    package static func plan(client: S3Client, options: S3PrefixDownloadOptions, sync: SyncOptions) async throws -> FolderSync {
        var plan = FolderSync()
        var listed: Set<Data> = []
        try await client.forEachListedPage(bucket: options.bucket, prefix: options.prefix) { page in
            for object in page {
                guard case .file(let relative) = S3PrefixPlan.placement(key: object.key, prefix: options.prefix),
                      options.filter.takes(relative) else { continue }
                listed.insert(Data(relative.utf8))
                let path = (options.destination as NSString).appendingPathComponent(relative)
                // As the download judges it: a file that holds the object is kept unless --overwrite.
                if options.overwrite != .overwrite, S3PrefixDownload.holds(path, object) {
                    plan.preview.unchanged.append(relative)
                } else {
                    plan.preview.copy.append((relative, object.size))
                }
            }
        }
        if sync.delete {
            let local = localFiles(options.destination)
            let names = local.map(\.relative)
            let extraneous = Set(SyncPlan.extraneous(source: listed, destination: names, filter: options.filter).map { Data($0.utf8) })
            plan.deletions = local.filter { extraneous.contains(Data($0.relative.utf8)) }
                .sorted { Data($0.relative.utf8).lexicographicallyPrecedes(Data($1.relative.utf8)) }
            plan.preview.delete = plan.deletions.map(\.relative)
            plan.preview.refusal = SyncPlan.refusal(deleting: plan.deletions.count, of: names.filter(options.filter.takes).count,
                                                    options: sync)
        }
        return plan
    }

    /// The regular files below `folder` as relative paths with their identities: symbolic links and
    /// what lies behind linked folders are not followed, and transferd's own files (a queue folder's
    /// content, partial downloads and their checkpoints, `OwnFiles`) are left out: never deleted.
    /// A folder the walk cannot read only hides files from deletion.
    static func localFiles(_ folder: String) -> [(relative: String, identity: FileStamp)] {
        guard let enumerator = FileManager.default.enumerator(atPath: folder) else { return [] }
        var found: [(relative: String, identity: FileStamp)] = []
        var queueFolders: Set<String> = OwnFiles.isQueueFolder(folder) ? [""] : []
        while let relative = enumerator.nextObject() as? String {
            var info = stat()
            let path = (folder as NSString).appendingPathComponent(relative)
            guard lstat(path, &info) == 0 else { continue }
            if (info.st_mode & S_IFMT) == S_IFDIR {
                if OwnFiles.isQueueFolder(path) { queueFolders.insert(relative) }
            } else if (info.st_mode & S_IFMT) == S_IFREG {
                found.append((relative, FileStamp(info)))
            }
        }
        let siblings = Set(found.map(\.relative))
        return found.filter { OwnFiles.reason(for: $0.relative, queueFolders: queueFolders, siblings: siblings) == nil }
    }

    /// Deletes the planned files below `folder`, each through no symbolic link and only while it is
    /// the file planned: not one the download replaced or saved (`saved`: the files it wrote, which
    /// on a case-insensitive folder may answer to a planned name too). Returns how many went.
    package func deleteExtraneous(in folder: String, saved: Set<[UInt64]>) throws -> Int {
        var removed = 0
        for item in deletions where !saved.contains(item.identity.file) {
            let path = (folder as NSString).appendingPathComponent(item.relative)
            if try ConfinedPath.removeFile(path, root: folder, expected: item.identity) { removed += 1 }
        }
        return removed
    }
}

/// The files a prefix download saved in this run, by identity (`FileStamp`): `deleteExtraneous`
/// leaves them alone. Fed from the download's events.
package final class SavedFiles: Sendable {
    private let files = Locked<Set<[UInt64]>>([])
    package init() {}

    package func note(_ event: S3PrefixEvent) {
        if case .saved(_, let path, _) = event, let identity = FileStamp.of(path) {
            files.withLock { _ = $0.insert(identity.file) }
        }
    }

    package var current: Set<[UInt64]> { files.current }
}

/// Every name below a folder, of any kind (files, links, folders, other file systems' mount
/// points), read strictly: a folder that cannot be read is an error, never a silent gap. A
/// folder upload's `--delete` keeps every object one of these names, so nothing it could not
/// see is taken for gone.
enum StrictWalk {
    static func names(_ folder: String) throws -> Set<Data> {
        var names: Set<Data> = []
        var pending: [String] = [""]
        while let relative = pending.popLast() {
            let path = relative.isEmpty ? folder : (folder as NSString).appendingPathComponent(relative)
            guard let directory = opendir(path) else {
                throw POSIXFailure(operation: "read the folder (--delete needs every name below it)", path: path)
            }
            defer { closedir(directory) }
            while true {
                errno = 0
                guard let entry = readdir(directory) else {
                    if errno != 0 { throw POSIXFailure(operation: "read the folder (--delete needs every name below it)", path: path) }
                    break
                }
                let name = withUnsafeBytes(of: entry.pointee.d_name) { raw in
                    String(decoding: raw.prefix { $0 != 0 }, as: UTF8.self)
                }
                if name == "." || name == ".." { continue }
                let child = relative.isEmpty ? name : relative + "/" + name
                names.insert(Data(child.utf8))
                var info = stat()
                guard lstat((folder as NSString).appendingPathComponent(child), &info) == 0 else {
                    throw POSIXFailure(operation: "look at (--delete needs every name below the folder)",
                                       path: (folder as NSString).appendingPathComponent(child))
                }
                if (info.st_mode & S_IFMT) == S_IFDIR { pending.append(child) }
            }
        }
        return names
    }
}
