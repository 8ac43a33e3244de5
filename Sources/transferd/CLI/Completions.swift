import Foundation
import TransferCore

/// `transferd completion bash|zsh|fish`: a completion script for the shell, made from the
/// command table and each command's options (`CommandHelp`), so it never lags behind them.
enum Completions {
    static let help = CommandHelp(name: "completion", usage: "transferd completion bash|zsh|fish", summary: """
        Prints a completion script for the shell: commands, their options and what each takes.
        bash: `source <(transferd completion bash)` (or save it in /etc/bash_completion.d/transferd).
        zsh: save it as _transferd in a folder of $fpath. fish: save it in ~/.config/fish/completions/transferd.fish.
        """, options: [StandardFlags.help.spec])

    static func run(_ argv: [String]) -> ExitCode {
        do {
            let arguments = try ParsedArguments.parse(argv, specs: help.options, command: "completion")
            if arguments.wantsHelp {
                Output.out(help.text)
                return .success
            }
            guard arguments.positionals.count == 1 else { throw UsageError("name one shell: bash, zsh or fish") }
            let commands = TransferdMain.commands
            switch arguments.positionals[0] {
            case "bash": Output.out(bash(commands))
            case "zsh": Output.out(zsh(commands))
            case "fish": Output.out(fish(commands))
            case let other:
                let guess = Spelling.closest(to: other, in: ["bash", "zsh", "fish"]).map { " (did you mean \($0)?)" } ?? ""
                throw UsageError("no completion for '\(other)'\(guess); bash, zsh and fish have one")
            }
            return .success
        } catch {
            Output.err("transferd completion: \(CommandError.text(error))\n")
            return ExitCode.of(error, otherwise: .usage)
        }
    }

    /// Values an option takes that can be listed; files and folders for paths.
    private enum Values {
        case words([String]), files, directories, none
    }

    private static func values(of option: OptionSpec) -> Values {
        guard let name = option.valueName else { return .none }
        switch name {
        case "DIR", "QUEUE_DIR": return .directories
        case "PATH", "FILE": return .files
        default:
            // `curl|urlsession`, `md5|sha256`: the choices themselves.
            let choices = name.split(separator: "|").map(String.init)
            return choices.count > 1 && choices.allSatisfy({ $0.allSatisfy { $0.isLetter || $0.isNumber || $0 == "-" } })
                ? .words(choices) : .none
        }
    }

    static func bash(_ commands: [Command]) -> String {
        var cases = ""
        for command in commands {
            let words = command.help.options.flatMap(\.names).joined(separator: " ")
            let taking = command.help.options.filter { $0.valueName != nil }.flatMap(\.names).joined(separator: "|")
            cases += "        \(command.name))\n            options=\"\(words)\"\n"
            if !taking.isEmpty {
                cases += "            case $previous in\n"
                for option in command.help.options where option.valueName != nil {
                    let pattern = option.names.joined(separator: "|")
                    switch values(of: option) {
                    case .words(let choices):
                        cases += "                \(pattern)) mapfile -t COMPREPLY < <(compgen -W \"\(choices.joined(separator: " "))\" -- \"$current\"); return ;;\n"
                    case .directories:
                        cases += "                \(pattern)) mapfile -t COMPREPLY < <(compgen -d -- \"$current\"); return ;;\n"
                    case .files:
                        cases += "                \(pattern)) mapfile -t COMPREPLY < <(compgen -f -- \"$current\"); return ;;\n"
                    case .none:
                        cases += "                \(pattern)) return ;;\n"
                    }
                }
                cases += "            esac\n"
            }
            cases += "            ;;\n"
        }
        return """
            # bash completion for transferd (made by `transferd completion bash`); one file name
            # per line (mapfile), so names with spaces or glob characters stay whole
            _transferd() {
                local current=${COMP_WORDS[COMP_CWORD]} previous=${COMP_WORDS[COMP_CWORD-1]} options=""
                COMPREPLY=()
                if ((COMP_CWORD == 1)); then
                    mapfile -t COMPREPLY < <(compgen -W "\(commands.map(\.name).joined(separator: " ")) help" -- "$current")
                    return
                fi
                case ${COMP_WORDS[1]} in
            \(cases)    esac
                if [[ $current == -* ]]; then
                    mapfile -t COMPREPLY < <(compgen -W "$options" -- "$current")
                else
                    mapfile -t COMPREPLY < <(compgen -f -- "$current")
                fi
            }
            complete -o filenames -F _transferd transferd

            """
    }

    /// Text inside a zsh `_arguments` description, which ends at `]` and splits at `:`.
    private static func zshText(_ text: String) -> String {
        text.replacingOccurrences(of: "\\", with: "\\\\").replacingOccurrences(of: "[", with: "(")
            .replacingOccurrences(of: "]", with: ")").replacingOccurrences(of: ":", with: "\\:")
            .replacingOccurrences(of: "'", with: "'\\''")
    }

    static func zsh(_ commands: [Command]) -> String {
        var cases = ""
        for command in commands {
            var specs: [String] = []
            for option in command.help.options {
                let exclusive = option.names.count > 1 ? "(\(option.names.joined(separator: " ")))" : ""
                let names = option.names.count > 1 ? "{\(option.names.joined(separator: ","))}" : option.names[0]
                var value = ""
                if let valueName = option.valueName {
                    switch values(of: option) {
                    case .words(let choices): value = ":\(zshText(valueName)):(\(choices.joined(separator: " ")))"
                    case .directories: value = ":\(zshText(valueName)):_files -/"
                    case .files: value = ":\(zshText(valueName)):_files"
                    case .none: value = ":\(zshText(valueName)): "
                    }
                }
                // `{-o,--output}` must stay outside the quotes for zsh to expand it.
                if option.names.count > 1 {
                    specs.append("'\(exclusive)'\(names)'[\(zshText(option.help))]\(value)'")
                } else {
                    specs.append("'\(names)[\(zshText(option.help))]\(value)'")
                }
            }
            specs.append("'*:argument:_files'")
            cases += "        \(command.name))\n            _arguments -s \\\n                "
                + specs.joined(separator: " \\\n                ") + "\n            ;;\n"
        }
        let described = commands.map { "        '\($0.name):\(zshText($0.summary))'" }.joined(separator: "\n")
        return """
            #compdef transferd
            # zsh completion for transferd (made by `transferd completion zsh`)
            _transferd() {
                local -a commands
                commands=(
            \(described)
                )
                if ((CURRENT == 2)); then
                    _describe -t commands 'transferd command' commands
                    return
                fi
                words=(${words[2,-1]})
                ((CURRENT--))
                case ${words[1]} in
            \(cases)    esac
            }
            _transferd "$@"

            """
    }

    /// Text inside a fish single-quoted string.
    private static func fishText(_ text: String) -> String {
        text.replacingOccurrences(of: "\\", with: "\\\\").replacingOccurrences(of: "'", with: "\\'")
    }

    static func fish(_ commands: [Command]) -> String {
        var lines = ["# fish completion for transferd (made by `transferd completion fish`)",
                     "complete -c transferd -f"]
        let names = commands.map(\.name).joined(separator: " ")
        for command in commands {
            lines.append("complete -c transferd -n 'not __fish_seen_subcommand_from \(names)' -a \(command.name)"
                         + " -d '\(fishText(command.summary))'")
        }
        for command in commands {
            for option in command.help.options {
                var line = "complete -c transferd -n '__fish_seen_subcommand_from \(command.name)'"
                for name in option.names {
                    line += name.hasPrefix("--") ? " -l \(name.dropFirst(2))" : " -s \(name.dropFirst())"
                }
                switch values(of: option) {
                case .words(let choices): line += " -x -a '\(choices.joined(separator: " "))'"
                case .files, .directories: line += " -r -F"
                case .none: if option.valueName != nil { line += " -x" }
                }
                line += " -d '\(fishText(option.help))'"
                lines.append(line)
            }
            // Arguments that are not options: files (a job file, a path to upload) or anything.
            lines.append("complete -c transferd -n '__fish_seen_subcommand_from \(command.name)' -F")
        }
        return lines.joined(separator: "\n") + "\n"
    }
}
