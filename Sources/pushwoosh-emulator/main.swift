// pushwoosh-emulator: a fake Pushwoosh server (docs/emulator.md D). The logic lives in
// the Emulator module; closures in main.swift must not run on other threads (PITFALLS).
import Emulator
import Glibc

exit(EmulatorCommand.main())
