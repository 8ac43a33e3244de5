import Foundation
import TransferCore

/// `--dry-run`, `--delete`, `--max-delete` and `--force`: the options of the bulk verbs
/// (a folder to a prefix, a prefix to a prefix) that make them a sync.
enum SyncFlags {
    static let dryRun = Flag.presence("--dry-run", help: "bulk copy: say what would be copied, skipped and deleted; change nothing")
    static let delete = Flag.presence("--delete", help: "bulk copy: then delete what the destination holds and the source does not (the filters apply)")
    static let maxDelete = Flag.integer("--max-delete", value: "PERCENT", range: 0...100,
                                        help: "most of what the destination holds that --delete may remove (default: 50); past it, or all of it, needs --force")
    static let force = Flag.presence("--force", help: "let --delete remove past --max-delete, or everything")

    static let specs: [OptionSpec] = [dryRun.spec, delete.spec, maxDelete.spec, force.spec]

    /// The options given, or a usage error (`--max-delete` out of 0–100, flags without `--delete`).
    static func options(_ given: SyncFlagOptions) throws -> SyncOptions {
        var options = SyncOptions(dryRun: given.dryRun, delete: given.delete, force: given.force)
        if let percent = try given.maxDelete { options.maxDeleteShare = Double(percent) / 100 }
        for spec in [maxDelete.spec, force.spec] where given.given(spec) && !options.delete {
            throw UsageError("\(spec.key) goes with --delete")
        }
        return options
    }

    /// Refuses the sync options on a command that moves one file.
    static func refuseForOne(_ given: SyncFlagOptions, what: String) throws {
        for spec in specs where given.given(spec) {
            throw UsageError("\(spec.key) is for a bulk copy (a folder or a prefix); \(what) is one object")
        }
    }

    /// What `--dry-run` prints (stdout, one line per name, then the counts).
    static func print(_ preview: SyncPreview) {
        var text = ""
        for item in preview.copy { text += "would copy    \(TerminalText.escaped(item.name))  (\(Format.bytes(item.size)))\n" }
        for name in preview.unchanged { text += "unchanged     \(TerminalText.escaped(name))\n" }
        for name in preview.delete { text += "would delete  \(TerminalText.escaped(name))\n" }
        let bytes = preview.copy.reduce(Int64(0)) { $0 + $1.size }
        text += "dry run: \(preview.copy.count) to copy (\(Format.bytes(bytes))), \(preview.unchanged.count) unchanged, "
            + "\(preview.delete.count) to delete; nothing was changed\n"
        if let refusal = preview.refusal { text += "and without --dry-run: \(refusal)\n" }
        Output.out(text)
    }
}

/// The sync flags of one command line, typed.
struct SyncFlagOptions: TypedOptions {
    let arguments: ParsedArguments

    init(_ arguments: ParsedArguments) { self.arguments = arguments }

    var dryRun: Bool { arguments[SyncFlags.dryRun] }
    var delete: Bool { arguments[SyncFlags.delete] }
    var maxDelete: Int? { get throws { try arguments.read(SyncFlags.maxDelete) } }
    var force: Bool { arguments[SyncFlags.force] }
}
