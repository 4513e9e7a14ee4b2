"""Use cases of turnkeeper: services that apply domain rules through ports.

Nothing here imports a driver or a web framework; adapters satisfy the protocols of
`turnkeeper.application.ports` structurally and are wired together in
`turnkeeper.application.bootstrap`.
"""
