"""vLLM with schedlab's schedulers: the scheduler classes (a queue policy, step plans), vLLM's
scheduler built without a model or a device, the in-process engine (the ``vllm`` backend), the
server's plug-in, middleware and logits processor, and the engine's steps as a profile source."""

from schedlab.registry import register_backend

register_backend("vllm", summary="a real vLLM engine on the wall clock, in process (schedlab vllm-run) or served "
                                 "(schedlab vllm-serve)")
