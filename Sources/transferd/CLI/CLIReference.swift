import Foundation

/// docs/cli.md: every command with its usage, what it does and its options, made from the
/// command table (`CLIReferenceTests` checks the page against it, as rclone makes its docs
/// from its commands).
enum CLIReference {
    static func markdown(_ commands: [Command]) -> String {
        var text = """
            # Command-line reference

            Made from transferd's own command table: `transferd COMMAND --help` prints the same
            (regenerate this page with `TRANSFERD_UPDATE_GOLDEN=1 swift test --filter CommandLineTests`).
            Exit codes are in [exit-codes.md](exit-codes.md). A mistyped command or option is
            answered with the nearest one ("did you mean --connections?").

            Shell completion, made from the same table (commands, options, and the choices an
            option takes):

            ```sh
            source <(transferd completion bash)                          # bash, now; or save it in /etc/bash_completion.d/transferd
            transferd completion zsh > "${fpath[1]}/_transferd"           # zsh, then start a new shell
            transferd completion fish > ~/.config/fish/completions/transferd.fish
            ```

            | command | what it does |
            |---|---|

            """
        for command in commands {
            text += "| [`\(command.name)`](#\(command.name)) | \(command.summary.replacingOccurrences(of: "|", with: "\\|")) |\n"
        }
        for command in commands {
            text += "\n## \(command.name)\n\n```\n\(command.help.usage)\n```\n\n\(command.help.summary)\n"
            let options = command.help.options
            guard !options.isEmpty else { continue }
            text += "\n| option | what it does |\n|---|---|\n"
            for option in options {
                var left = option.names.map { "`\($0)`" }.joined(separator: ", ")
                if let value = option.valueName { left += " `\(value.replacingOccurrences(of: "|", with: "\\|"))`" }
                text += "| \(left) | \(option.help.replacingOccurrences(of: "|", with: "\\|")) |\n"
            }
        }
        return text
    }
}
