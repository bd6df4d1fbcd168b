/* Vector table and reset handler of the STM32F103C8T6 example, in C (no vendor startup file):
 * copy .data from flash, zero .bss, run main. Also the three <string.h> functions the library and
 * GCC's struct copies call, since the firmware links without a C library (-nostdlib). */
#include <stddef.h>
#include <stdint.h>

#include "stm32f103_regs.h"

extern uint32_t _sidata, _sdata, _edata, _sbss, _ebss, _estack; /* from stm32f103c8.ld */

int main(void);
void Reset_Handler(void);
void Default_Handler(void);
void SysTick_Handler(void);
void DMA1_Channel5_IRQHandler(void);
void USART1_IRQHandler(void);

void Reset_Handler(void) {
  uint32_t *src = &_sidata, *dst = &_sdata;
  while (dst < &_edata) *dst++ = *src++;
  for (dst = &_sbss; dst < &_ebss; ++dst) *dst = 0;
  (void)main();
  for (;;) {
  }
}

void Default_Handler(void) {
  for (;;) {
  }
}

typedef void (*isr_fn)(void);

/* The first word is the initial stack pointer, then the 15 core exceptions, then the IRQs. */
typedef struct vector_table {
  const uint32_t *stack_top;
  isr_fn core[15];
  isr_fn irq[IRQ_COUNT];
} vector_table;

__attribute__((section(".isr_vector"), used)) static const vector_table vectors = {
    &_estack,
    {Reset_Handler, Default_Handler /* NMI */, Default_Handler /* HardFault */, Default_Handler /* MemManage */,
     Default_Handler /* BusFault */, Default_Handler /* UsageFault */, 0, 0, 0, 0, Default_Handler /* SVCall */,
     Default_Handler /* DebugMon */, 0, Default_Handler /* PendSV */, SysTick_Handler},
    /* IRQ 15 = DMA1 channel 5 (USART1_RX), IRQ 37 = USART1; every other IRQ is unused here. */
    {
     Default_Handler, Default_Handler, Default_Handler, Default_Handler,
     Default_Handler, Default_Handler, Default_Handler, Default_Handler,
     Default_Handler, Default_Handler, Default_Handler, Default_Handler,
     Default_Handler, Default_Handler, Default_Handler, DMA1_Channel5_IRQHandler /* 15 */,
     Default_Handler, Default_Handler, Default_Handler, Default_Handler,
     Default_Handler, Default_Handler, Default_Handler, Default_Handler,
     Default_Handler, Default_Handler, Default_Handler, Default_Handler,
     Default_Handler, Default_Handler, Default_Handler, Default_Handler,
     Default_Handler, Default_Handler, Default_Handler, Default_Handler,
     Default_Handler, USART1_IRQHandler /* 37 */, Default_Handler, Default_Handler,
     Default_Handler, Default_Handler, Default_Handler}};

/* Byte loops: the build passes -fno-tree-loop-distribute-patterns so GCC does not turn these very
 * loops back into calls to themselves. */
void *memcpy(void *dst, const void *src, size_t n);
void *memmove(void *dst, const void *src, size_t n);
void *memset(void *dst, int c, size_t n);

void *memcpy(void *dst, const void *src, size_t n) {
  uint8_t *d = dst;
  const uint8_t *s = src;
  while (n-- != 0u) *d++ = *s++;
  return dst;
}

void *memmove(void *dst, const void *src, size_t n) {
  uint8_t *d = dst;
  const uint8_t *s = src;
  if (d < s) {
    while (n-- != 0u) *d++ = *s++;
  } else {
    while (n-- != 0u) d[n] = s[n];
  }
  return dst;
}

void *memset(void *dst, int c, size_t n) {
  uint8_t *d = dst;
  while (n-- != 0u) *d++ = (uint8_t)c;
  return dst;
}
