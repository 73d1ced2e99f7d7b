"""The Redis contract both processes share: reaching Redis (`client`, `batching`), every key name
(`keys`), the job records the receiver writes and the reconciler reads (`jobs`), and the reconciler's
own coordination (`seats`). The two halves do not import each other.
"""
