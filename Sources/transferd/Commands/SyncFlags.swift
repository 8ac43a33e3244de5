import Foundation
import TransferCore

/// `--dry-run`, `--delete`, `--max-delete` and `--force`: the options of the bulk verbs
/// (a folder to a prefix, a prefix to a prefix) that make them a sync.
enum SyncFlags {
    static let specs: [OptionSpec] = [
        OptionSpec("--dry-run", help: "bulk copy: say what would be copied, skipped and deleted; change nothing"),
        OptionSpec("--delete", help: "bulk copy: then delete what the destination holds and the source does not (the filters apply)"),
        OptionSpec("--max-delete", value: "PERCENT", help: "most of what the destination holds that --delete may remove (default: 50); past it, or all of it, needs --force"),
        OptionSpec("--force", help: "let --delete remove past --max-delete, or everything"),
    ]

    /// The options given, or a usage error (`--max-delete` out of 0–100, flags without `--delete`).
    static func options(_ arguments: ParsedArguments) throws -> SyncOptions {
        var options = SyncOptions(dryRun: arguments.has("--dry-run"), delete: arguments.has("--delete"), force: arguments.has("--force"))
        if let percent = try arguments.integer("--max-delete", range: 0...100) { options.maxDeleteShare = Double(percent) / 100 }
        for flag in ["--max-delete", "--force"] where arguments.has(flag) && !options.delete {
            throw UsageError("\(flag) goes with --delete")
        }
        return options
    }

    /// Refuses the sync options on a command that moves one file.
    static func refuseForOne(_ arguments: ParsedArguments, what: String) throws {
        for flag in ["--dry-run", "--delete", "--max-delete", "--force"] where arguments.has(flag) {
            throw UsageError("\(flag) is for a bulk copy (a folder or a prefix); \(what) is one object")
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
