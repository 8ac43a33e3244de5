import Foundation

/// `--dry-run` and `--delete` for a prefix downloaded into a folder (`get s3://…/ -o DIR`):
/// the plan comes from one listing of the prefix and one walk of the folder, before any
/// byte moves; the deletions are made once the download succeeded.
package struct FolderSync: Sendable {
    package var preview = SyncPreview()

    /// What a download of `options`' prefix into its folder would do, and what `--delete` would
    /// remove (refused here, before anything happens, past `SyncPlan.refusal`).
    package static func plan(client: S3Client, options: S3PrefixDownloadOptions, sync: SyncOptions) async throws -> FolderSync {
        var plan = FolderSync()
        var listed: Set<Data> = []
        try await client.forEachListedPage(bucket: options.bucket, prefix: options.prefix) { page in
            for object in page {
                guard case .file(let relative) = S3PrefixPlan.placement(key: object.key, prefix: options.prefix),
                      options.filter.takes(relative) else { continue }
                listed.insert(Data(relative.utf8))
                let path = (options.destination as NSString).appendingPathComponent(relative)
                if options.overwrite == .skipIfIdentical, S3PrefixDownload.holds(path, object) {
                    plan.preview.unchanged.append(relative)
                } else {
                    plan.preview.copy.append((relative, object.size))
                }
            }
        }
        if sync.delete {
            let local = localFiles(options.destination)
            plan.preview.delete = SyncPlan.extraneous(source: listed, destination: local, filter: options.filter)
            if let refusal = SyncPlan.refusal(deleting: plan.preview.delete.count, keeping: listed.count, options: sync) {
                throw SyncRefusal(reason: refusal)
            }
        }
        return plan
    }

    /// The regular files below `folder` as relative paths: symbolic links and what lies behind
    /// linked folders are not followed, and transferd's own files (a queue folder's content,
    /// partial downloads and their checkpoints, `OwnFiles`) are left out: never deleted.
    static func localFiles(_ folder: String) -> [String] {
        guard let enumerator = FileManager.default.enumerator(atPath: folder) else { return [] }
        var found: [String] = []
        var queueFolders: Set<String> = OwnFiles.isQueueFolder(folder) ? [""] : []
        while let relative = enumerator.nextObject() as? String {
            var info = stat()
            let path = (folder as NSString).appendingPathComponent(relative)
            guard lstat(path, &info) == 0 else { continue }
            if (info.st_mode & S_IFMT) == S_IFDIR {
                if OwnFiles.isQueueFolder(path) { queueFolders.insert(relative) }
            } else if (info.st_mode & S_IFMT) == S_IFREG {
                found.append(relative)
            }
        }
        let siblings = Set(found)
        return found.filter { OwnFiles.reason(for: $0, queueFolders: queueFolders, siblings: siblings) == nil }
    }

    /// Deletes the planned files below `folder`, each reached through no symbolic link
    /// (`ConfinedPath`); a file already gone is no error. Returns how many were removed.
    package func deleteExtraneous(in folder: String) throws -> Int {
        var removed = 0
        for relative in preview.delete {
            let path = (folder as NSString).appendingPathComponent(relative)
            try ConfinedPath.check(path, root: folder, create: false, finalMustNotBeLink: true)
            if unlink(path) == 0 {
                removed += 1
            } else if errno != ENOENT {
                throw POSIXFailure(operation: "delete (--delete)", path: path)
            }
        }
        return removed
    }
}
