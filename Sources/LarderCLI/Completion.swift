import Foundation
import LarderClient

/// What Tab offers, at the prompt and in bash and zsh (whose scripts ask `larder __complete WORDS...`): commands,
/// subcommands, options, option values with a fixed set, and collection names asked of the server.
enum Completion {
    /// Words only the prompt knows.
    static let promptWords = ["exit", "history", "quit"]

    /// The candidates for the last of `words` (the word being typed, "" after a space), in order.
    /// `collections` is asked only when a collection name is wanted.
    static func candidates(
        _ words: [String], prompt: Bool, collections: () async -> [String]
    ) async -> [String] {
        let word = words.last ?? ""
        let before = words.dropLast()
        let allOptions = CommandSpec.globalOptions + Commands.all.flatMap(\.options)
        var positionals: [String] = []
        var pendingOption: OptionSpec?
        for token in before {
            // The value of the option before it.
            if pendingOption != nil {
                pendingOption = nil
                continue
            }
            if token.hasPrefix("--") && token.count > 2 {
                let name = String(token.dropFirst(2))
                if !name.contains("="), let spec = allOptions.first(where: { $0.name == name }), spec.value != nil {
                    pendingOption = spec
                }
                continue
            }
            if token.hasPrefix("-") && token.count == 2 {
                let spec = allOptions.first { $0.short == token.last }
                if spec?.value != nil { pendingOption = spec }
                continue
            }
            positionals.append(token)
        }
        let command = Commands.all.first { spec in
            positionals.count >= spec.words.count && Array(positionals.prefix(spec.words.count)) == spec.words
        }
        var offered: [String]
        if let option = pendingOption {
            offered = values(of: option)
        } else if word.hasPrefix("-") {
            offered = ((command?.options ?? []) + CommandSpec.globalOptions).map { "--" + $0.name }
        } else if let command {
            let index = positionals.count - command.words.count
            offered = await arguments(of: command, at: index, positionals: positionals, collections: collections)
        } else if positionals.isEmpty {
            offered = Array(Set(Commands.all.map { $0.words[0] })) + (prompt ? promptWords : [])
        } else if positionals.count == 1 {
            offered = Commands.all.filter { $0.words.count == 2 && $0.words[0] == positionals[0] }.map { $0.words[1] }
        } else {
            offered = []
        }
        return Array(Set(offered.filter { $0.hasPrefix(word) })).sorted()
    }

    /// Values for an option that takes one of a fixed set.
    static func values(of option: OptionSpec) -> [String] {
        switch option.name {
        case "mode": Transfer.Mode.allCases.map(\.rawValue)
        default: []
        }
    }

    /// The command's positional argument number `index`, by its placeholder in the usage (`COLLECTION`, `COMMAND`).
    static func arguments(
        of command: CommandSpec, at index: Int, positionals: [String], collections: () async -> [String]
    ) async -> [String] {
        switch command.name {
        case "help":
            // `help blob` then `put`.
            if index == 0 { return Array(Set(Commands.all.map { $0.words[0] })) }
            if index == 1 {
                let group = Commands.all.filter { $0.words.count == 2 && $0.words[0] == positionals.last }
                return group.map { $0.words[1] }
            }
            return []
        case "completion": return index == 0 ? ["bash", "zsh"] : []
        default:
            let placeholders = command.arguments.split(separator: " ")
                .map { $0.trimmingCharacters(in: CharacterSet(charactersIn: "[].")) }
            guard index < placeholders.count, placeholders[index] == "COLLECTION" else { return [] }
            return await collections()
        }
    }

    /// Splits the line up to the cursor into words as the prompt will (an open quote is allowed: the word is still
    /// being typed); after a space the last word is "".
    static func words(_ line: String) -> [String] {
        let scan = scanWords(line)
        return scan.words + [scan.last ?? ""]
    }

    /// The script for `larder completion SHELL`, nil for a shell it has none for.
    static func script(for shell: String) -> String? {
        switch shell {
        case "bash": bash
        case "zsh": zsh
        default: nil
        }
    }

    static let bash = #"""
        # bash completion for larder: eval "$(larder completion bash)", or save it as /etc/bash_completion.d/larder.
        # Tab completes commands, options and collection names (asked of the server the command line names).
        _larder() {
            local IFS=$'\n'
            local candidates
            candidates=$("${COMP_WORDS[0]}" __complete "${COMP_WORDS[@]:1:COMP_CWORD}" 2>/dev/null)
            if [ -n "$candidates" ]; then
                COMPREPLY=($(compgen -W "$candidates" -- "${COMP_WORDS[COMP_CWORD]}"))
            else
                COMPREPLY=()
            fi
        }
        complete -o default -F _larder larder

        """#

    static let zsh = #"""
        #compdef larder
        # zsh completion for larder: eval "$(larder completion zsh)" after compinit, or save it as _larder in $fpath.
        # Tab completes commands, options and collection names (asked of the server the command line names).
        _larder() {
            local -a candidates
            candidates=("${(@f)$(${words[1]} __complete "${(@)words[2,CURRENT]}" 2>/dev/null)}")
            if (( ${#candidates} )) && [[ -n ${candidates[1]} ]]; then
                compadd -- "${candidates[@]}"
            else
                _files
            fi
        }
        if [[ ${zsh_eval_context[-1]} == loadautofunc ]]; then
            _larder "$@"
        else
            compdef _larder larder
        fi

        """#
}
